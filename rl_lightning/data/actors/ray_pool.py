"""``RayActorPool``: the actors as Ray actors, on this machine or across a cluster, behind ``ActorPool``'s contract.

Imported only when ``data.actor_backend`` is ``ray`` (Ray is the optional extra ``pip install -e ".[ray]"``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from tensordict import TensorDict

from rl_lightning.data.actors.gather import (
    ActorRollout,
    Gathering,
    PoolSettings,
    RolloutInfo,
    actor_spec,
    announce_replacement,
    env_name,
    failed_too_often,
)
from rl_lightning.data.actors.policy_factory import PolicyFactory
from rl_lightning.data.actors.ray_actor import RayActor
from rl_lightning.data.actors.ray_checks import LocalRay, connect, cpus_of_cluster, refuse_too_many_actors
from rl_lightning.data.actors.recipes import SingleAgentRecipe
from rl_lightning.data.actors.worker import ActorSpec
from rl_lightning.errors import EnvError
from rl_lightning.processes import stop
from rl_lightning.processes.learner_waits import learner_waiting

POLL_S = 0.05
#: A new actor is placed, imports torch and builds its envs and policy before its first rollout: allow it this long.
STARTUP_TIMEOUT_S = 300.0
#: How often an actor that has not answered yet looks whether the cluster has a CPU for it (``ray.nodes()``).
PLACEMENT_CHECK_S = 1.0


@dataclass
class _Actor:
    spec: ActorSpec
    handle: Any
    node: str | None  # the node asked for (``None``: wherever Ray places it)
    in_flight: deque[tuple[Any, int]] = field(default_factory=deque)  # (result reference, weights version sent)
    waiting_since: float = field(default_factory=time.monotonic)  # since when the oldest request is awaited
    answered: bool = False  # a first rollout came back (before it, the startup allowance applies)
    failures_in_a_row: int = 0
    replaced: str = ""  # why the actor before it was replaced ("": the first of its index)
    unplaced_since: float | None = None  # since when the cluster has had no CPU for it (``None``: it has one)
    next_placement_check: float = 0.0


class RayActorPool:
    """Starts ``num_actors`` Ray actors (one CPU each) with the module's acting policy and hands their rollouts to the
    learner, exactly as ``ActorPool`` does with processes.

    Weights are put in Ray's object store once per version (``publish``); each actor keeps ``max_policy_lag``
    requests in flight, every request carrying the newest version's reference, so no rollout lags more than
    ``max_policy_lag`` versions; a staler one (the learner moved several versions in one update) is dropped and
    counted in ``dropped_rollouts`` (collected whole: its env steps count). An actor whose request fails (its env
    raised, its process or node died) or that returns no rollout for ``heartbeat_timeout_s`` is killed and replaced
    by a fresh actor with the next seed generation, placed wherever the cluster has a CPU, and the run is told in one
    line; the rollout it was collecting is counted in ``lost_rollouts`` and adds no env steps (how far it got is
    unknown; Ray runs an actor's requests one at a time, so those queued behind it had not started, and go to the
    replacement). A replacement the cluster has no CPU for (its node died and every other CPU is taken) is said at
    once, and raises an ``EnvError`` if no CPU frees within ``heartbeat_timeout_s``. ``max_failures`` failures of one
    actor in a row raise the same ``EnvError`` as the process pool. The learner's own Ray processes (its node's raylet,
    and the head's GCS when it runs here) are watched: when one dies the next call raises an ``EnvError`` saying so
    (Ray itself would end the process without a word at its next call into the dead node). Actors fill the other
    nodes before the learner's own (the learner needs its cores). ``close`` kills every actor with ``ray.kill`` and,
    if this pool started or connected Ray, shuts its session down.

    Args:
        settings: the datamodule's actor settings.
        env: the env core each actor copies.
        policy: builds the acting module in each actor.
        state_dict: the learner's acting weights (unused before ``publish``; kept for ``ActorPool``'s signature).
        recipe: called at every (re)start of an actor: what it builds its collector from (``recipes.py``).
        address: ``None`` starts a local Ray instance (one CPU per core of this machine); ``"auto"`` or
            ``"host:port"`` connects to a running cluster. Ignored when Ray is already initialised in this process.
    """

    def __init__(
        self,
        settings: PoolSettings,
        env: Any,
        policy: PolicyFactory,
        state_dict: dict[str, torch.Tensor],
        recipe: Callable[[], Any] = SingleAgentRecipe,
        address: str | None = None,
    ) -> None:
        self.settings = settings
        self.env = env
        self.policy = policy
        self.recipe = recipe
        self.owns_ray = connect(address)
        self._closed = False
        self.actors: list[_Actor] = []
        self._handles: list[Any] = []  # every actor ever started, for the finalizer
        # At exit, or when dropped unclosed; close() runs it once and detaches it (run later, when this session is
        # long gone, it would shut down whatever Ray session the process has then).
        self._finalizer = weakref.finalize(self, RayActorPool._kill_all, self._handles, self.owns_ray)
        # DDP ranks that share this cluster (a local instance, one rank per machine, is this rank's alone)
        self._ranks = _ranks() if address is not None else 1
        try:
            refuse_too_many_actors(settings.num_actors, cpus_of_cluster(), address, self._ranks)
            self._local = LocalRay.of_this_process()
        except BaseException:
            self.close()
            raise
        self._remote = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(RayActor)
        self.generation = settings.seed_generation
        self.restarts = 0
        self.dropped_rollouts = 0  # received whole but too stale for their update (their env steps count)
        self.lost_rollouts = 0  # lost with a failed actor (no env steps counted)
        self.version = -1
        self.publishes = 0  # weights put so far (a version is put again when its tensors moved)
        self._weights: Any = None
        self._sent: dict[str, torch.Tensor] = {}  # what the last put holds
        self._gathering = Gathering(settings)
        for index in range(settings.num_actors):
            self.actors.append(self._start(index, self.generation))

    # ----- actors -------------------------------------------------------------------------------------------
    def _start(self, index: int, generation: int) -> _Actor:
        """A fresh Ray actor ``index`` of ``generation``, on the node with the most room (other nodes first)."""
        spec = actor_spec(self.settings, self.env, self.policy, self.recipe(), index, generation, os.getpid())
        node = self._roomiest_node(index)
        # Spill: another DDP rank's pool, which this one does not see, may have taken that node's CPU first; run
        # wherever a CPU is free rather than wait on that node for ever.
        strategy = (
            "DEFAULT" if node is None else NodeAffinitySchedulingStrategy(node, soft=True, _spill_on_unavailable=True)
        )
        handle = self._remote.options(scheduling_strategy=strategy).remote(spec)
        self._handles.append(handle)
        return _Actor(spec, handle, node)

    def _roomiest_node(self, index: int) -> str | None:
        """The live node with a CPU left for actor ``index`` beside this pool's other actors, nodes other than the
        learner's first (``None``: no room anywhere now; Ray places it once a CPU frees up)."""
        own = ray.get_runtime_context().get_node_id()
        placed: dict[str | None, int] = {}
        for other, actor in enumerate(self.actors):
            if other != index:  # the actor being replaced leaves its CPU
                placed[actor.node] = placed.get(actor.node, 0) + 1
        room = [
            (node["NodeID"] == own, placed.get(node["NodeID"], 0), node["NodeID"])
            for node in ray.nodes()
            if node["Alive"] and node["Resources"].get("CPU", 0) > placed.get(node["NodeID"], 0)
        ]
        return min(room)[2] if room else None

    @property
    def pids(self) -> list[int]:
        """The live actors' process ids (on their own nodes); waits for each actor's requests in flight."""
        return [pid for _, pid in self.where()]

    def where(self) -> list[tuple[str, int]]:
        """``(node id, process id)`` of each live actor, in actor order."""
        return ray.get([actor.handle.where.remote() for actor in self.actors])

    def _replace(self, index: int, problem: str) -> None:
        """Kill actor ``index`` and start a fresh one, or raise after too many failures. The rollout it was collecting
        is lost; the requests queued behind it had not started, and go to the fresh actor."""
        old = self.actors[index]
        with contextlib.suppress(Exception):  # already dead with its node: nothing to kill
            ray.kill(old.handle, no_restart=True)
        self.lost_rollouts += 1
        failures = old.failures_in_a_row + 1
        if failures >= self.settings.max_failures:
            raise failed_too_often(self.settings, self.env, index, failures, problem)
        self.generation += 1
        self.restarts += 1
        if old.node is not None and old.node not in _live_nodes():
            problem = f"its node left the cluster: {problem}"
        fresh = self._start(index, self.generation)
        fresh.failures_in_a_row, fresh.replaced = failures, problem
        self.actors[index] = fresh
        if self._check_placement(index):  # else its one line says that it waits for a CPU
            announce_replacement(index, problem, self.restarts, 0)
        self._fill(index)

    def _check_placement(self, index: int) -> bool:
        """Whether the cluster has a CPU for every actor of this run (then actor ``index``, not answered yet, gets
        one); if not, say once that actor ``index`` waits for one, and raise once it waited ``heartbeat_timeout_s``."""
        actor, now = self.actors[index], time.monotonic()
        actor.next_placement_check = now + PLACEMENT_CHECK_S
        cpus, wanted = cpus_of_cluster(), len(self.actors) * self._ranks
        if cpus >= wanted:
            if actor.unplaced_since is not None:  # a CPU freed: its startup allowance starts now
                actor.unplaced_since, actor.waiting_since = None, now
            return True
        bound = self.settings.heartbeat_timeout_s
        if actor.unplaced_since is None:
            actor.unplaced_since = now
            lost = f" was lost ({actor.replaced}) and" if actor.replaced else ""
            print(
                f"rl-lightning: actor {index}{lost} waits for a CPU to be placed on: the Ray cluster's live nodes have "
                f"{_cpus(cpus)} for {wanted} actors; the run stops unless one frees within {bound:g} s "
                "(data.actor_heartbeat_s)",
                file=sys.stderr,
                flush=True,
            )
        elif now - actor.unplaced_since > bound:
            raise EnvError(
                env_name(self.env), None, self.settings.num_envs,
                f"in actor {index}: no CPU freed within {bound:g} s to place it on (data.actor_heartbeat_s): the Ray "
                f"cluster's live nodes have {_cpus(cpus)} for {wanted} actors; add a node (`ray start --address ...`) "
                "and resume with --ckpt_path last, or use fewer actors",
            )  # fmt: skip
        return False

    # ----- data ---------------------------------------------------------------------------------------------
    def publish(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Make the learner's weights of ``version`` the ones every actor's next request collects with.

        An unchanged version is put again when its tensors moved all the same (acting buffers such as SPO's
        observation normaliser, updated by ``process_rollout`` before any gradient step): the actors load those
        too, and their rollouts keep the tag ``version`` (the lag counts gradient steps)."""
        if version == self.version and all(
            torch.equal(tensor.detach().cpu(), self._sent[name]) for name, tensor in state_dict.items()
        ):
            return
        self._check_own_node()  # a put into a dead node's object store ends the process
        self._sent = {name: tensor.detach().to("cpu", copy=True) for name, tensor in state_dict.items()}
        self._weights = ray.put(self._sent)
        self.version = version
        self.publishes += 1

    def _fill(self, index: int) -> None:
        """Send actor ``index`` requests until ``max_policy_lag`` are in flight, each with the newest weights."""
        actor = self.actors[index]
        if not actor.in_flight:
            actor.waiting_since = time.monotonic()
        while len(actor.in_flight) < self.settings.max_policy_lag:
            request = actor.handle.collect.remote(self.version, self.publishes, [self._weights])
            actor.in_flight.append((request, self.version))

    def next_rollout(self, learner_version: int) -> ActorRollout:
        """Wait for one rollout from every actor, no more than ``max_policy_lag`` versions behind
        ``learner_version``; returns them side by side (columns in actor order)."""
        if self._weights is None:
            raise RuntimeError("RayActorPool.next_rollout before the first publish")
        start = time.perf_counter()
        for index in range(len(self.actors)):
            self._fill(index)
        parts: list[TensorDict] = []
        infos: list[RolloutInfo] = []
        stale = 0
        for index in range(len(self.actors)):
            batch, info, skipped = self._take(index, learner_version)
            parts.append(batch)
            infos.append(info)
            stale += skipped
        return self._gathering.rollout(
            parts, infos, stale, self.restarts, self.dropped_rollouts, start, lost=self.lost_rollouts
        )

    def _take(self, index: int, learner_version: int) -> tuple[TensorDict, RolloutInfo, int]:
        """Actor ``index``'s oldest fresh-enough rollout, and how many staler ones were dropped before it."""
        stale = 0
        while True:
            actor = self.actors[index]
            ref, version = actor.in_flight[0]
            self._check_own_node()  # before every call that may reach into this node's raylet
            with learner_waiting():  # background work of the learner (GameEvaluation) may run meanwhile
                ready, _ = ray.wait([ref], timeout=POLL_S)
            if not ready:
                stop.check()  # SIGTERM / Ctrl+C: the learner stops here; close() then kills the actors
                self._check_hung(index)
                continue
            actor.in_flight.popleft()
            actor.waiting_since = time.monotonic()  # the next request's turn
            self._check_own_node()
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as err:  # the actor's process or node died
                self._replace(index, _one_line(err))
                continue
            except OSError:  # this node's raylet went away during the call
                self._check_own_node()
                raise
            if result[0] == "error":
                self._replace(index, result[1])
                continue
            actor.answered, actor.unplaced_since = True, None
            self._fill(index)  # the freed place goes to a request with the newest weights
            _, batch, stats, collect_s, load_s = result
            if learner_version - version > self.settings.max_policy_lag:
                self.dropped_rollouts += 1  # too stale for the update: its env steps still count
                stale += 1
                continue
            actor.failures_in_a_row = 0
            return batch, (version, stats, collect_s, load_s), stale

    def _check_own_node(self) -> None:
        """Raise the run's one line if a Ray process the learner depends on died (its node's raylet, whose object
        store it reads rollouts from, or the head's GCS on this machine): Ray ends the process without a word at
        its next call into them."""
        gone = self._local.gone()
        if gone:
            raise EnvError(
                env_name(self.env), None, self.settings.num_envs,
                f"collected by Ray actors: {gone}, so the run cannot go on (start the Ray cluster again to resume)",
            )  # fmt: skip

    def _check_hung(self, index: int) -> None:
        actor = self.actors[index]
        if not actor.answered and time.monotonic() >= actor.next_placement_check and not self._check_placement(index):
            return  # waiting for a CPU: bounded by _check_placement, not by the heartbeat
        limit = self.settings.heartbeat_timeout_s + (0.0 if actor.answered else STARTUP_TIMEOUT_S)
        if time.monotonic() - actor.waiting_since > limit:
            self._replace(index, f"no rollout for {limit:g} s (hung env?)")

    # ----- shutdown -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Kill every actor (``ray.kill``) and end the Ray session this pool opened. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()

    @staticmethod
    def _kill_all(handles: list[Any], owns_ray: bool) -> None:
        if not ray.is_initialized():
            return
        for handle in handles:
            with contextlib.suppress(Exception):  # dead already
                ray.kill(handle, no_restart=True)
        handles.clear()
        if owns_ray:
            ray.shutdown()


def _cpus(cpus: float) -> str:
    return f"{cpus:g} CPU" + ("" if cpus == 1 else "s")


def _live_nodes() -> set[str]:
    return {node["NodeID"] for node in ray.nodes() if node["Alive"]}


def _ranks() -> int:
    """DDP ranks of this run (each starts its own actors)."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    return torch.distributed.get_world_size() if distributed else 1


def _one_line(err: BaseException) -> str:
    """The first line of a Ray error (they run to a page: the actor's death cause, its node, its ids)."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"
