"""``ActorPool``: actor processes collecting beside the learner, restarted when they fail, stopped by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any

import torch
import torch.multiprocessing as mp
from tensordict import TensorDict

from rl_lightning.data.actors.gather import (
    GENERATION_STRIDE,
    ActorRollout,
    Gathering,
    PoolSettings,
    RolloutInfo,
    actor_spec,
    announce_replacement,
    episode_means,
    episode_sums,
    failed_too_often,
)
from rl_lightning.data.actors.policy_factory import PolicyFactory
from rl_lightning.data.actors.recipes import SingleAgentRecipe
from rl_lightning.data.actors.weights import SharedWeights
from rl_lightning.data.actors.worker import ActorChannels, ActorSpec, actor_main
from rl_lightning.processes import stop
from rl_lightning.processes.child_processes import child_environ, forking_context, kill_pid, pid_alive, server_environ
from rl_lightning.processes.learner_threads import follow_actors, lend_idle_actors, stop_lending
from rl_lightning.processes.learner_waits import learner_waiting

POLL_S = 0.05
JOIN_TIMEOUT_S = 5.0
#: A new actor imports torch and builds its envs and policy before its first heartbeat: allow it this long.
STARTUP_TIMEOUT_S = 300.0

__all__ = ["GENERATION_STRIDE", "ActorPool", "ActorRollout", "PoolSettings", "episode_means", "episode_sums"]


@dataclass
class _Finished:
    """A rollout an actor finished and the learner has not taken yet: its slot's data and ``RolloutInfo``."""

    slot: int
    data: TensorDict  # the shared slot itself: it stays valid after the actor that wrote it died
    generation: int  # of the actor that collected it: only that actor gets the slot back
    info: RolloutInfo


@dataclass
class _Actor:
    spec: ActorSpec
    process: Any
    pipe: Any
    slots: list[TensorDict] | None = None
    waiting: deque[_Finished] = field(default_factory=deque)  # finished rollouts, oldest first
    failures_in_a_row: int = 0
    free_slots: int = 0  # slots handed to it that it has not announced as filled: > 0 means it is collecting
    held_slots: list[int] = field(default_factory=list)  # its slots kept back while rollouts of its predecessor wait


#: What the fork server imports before it forks any actor.
ACTOR_MODULES = ["rl_lightning.data.actors.worker"]


class ActorPool:
    """Starts ``num_actors`` processes with the module's acting policy and hands their rollouts to the learner.

    Every update the learner calls ``publish`` (new weights, when its version moved) and ``next_rollout`` (one
    rollout from each actor, concatenated along the env axis, so an update sees the same ``[T, num_envs]`` batch as
    the serial path). A rollout that lags more than ``max_policy_lag`` versions is dropped and counted
    (``dropped_rollouts``: collected whole, so its env steps count); an actor that raises, dies or stops beating is
    replaced with the newest weights and the next seed generation, says so in one line on the console, and keeps
    the rollouts it had finished (they are used in turn, the lag check still applies); only the rollout it was
    collecting is lost (``lost_rollouts``: no env steps counted). ``max_failures`` failures of one actor in a row
    raise an ``EnvError`` naming the env and its error. ``close`` (also at interpreter exit) stops the actors,
    joins them and kills any straggler by pid.

    Args:
        settings: the datamodule's actor settings.
        env: the env core each actor copies.
        policy: builds the acting module in each actor.
        state_dict: the learner's acting weights (names, shapes and dtypes of ``publish``).
        recipe: called at every (re)start of an actor: what it builds its collector from (``recipes.py``); the
            default is a plain ``Collector``.
        context: a multiprocessing start method to use instead of the default, ``child_processes.forking_context``
            (a fork server that imports the actor's modules once: an actor, or a replacement, starts in a fraction
            of a second). Never ``fork`` a process that runs torch threads.
    """

    def __init__(
        self,
        settings: PoolSettings,
        env: Any,
        policy: PolicyFactory,
        state_dict: dict[str, torch.Tensor],
        recipe: Callable[[], Any] = SingleAgentRecipe,
        context: str | None = None,
    ) -> None:
        self.settings = settings
        self.env = env
        self.policy = policy
        self.recipe = recipe
        self.envs_per_actor = settings.num_envs // settings.num_actors
        self.context = forking_context(ACTOR_MODULES) if context is None else mp.get_context(context)
        self.weights = SharedWeights(state_dict)
        self.stop_flag = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.heartbeat = torch.zeros(settings.num_actors, dtype=torch.float64).share_memory_()
        self.idle = torch.zeros(settings.num_actors, dtype=torch.int8).share_memory_()
        self._pids: list[int] = []  # the current actors' pids, read by the finalizer at interpreter exit
        self._started = [0.0] * settings.num_actors
        self.generation = settings.seed_generation
        self.restarts = 0
        self.dropped_rollouts = 0
        self.lost_rollouts = 0
        self.actors: list[_Actor] = []
        self._closed = False
        self._gathering = Gathering(settings)
        self._finalizer = weakref.finalize(self, ActorPool._kill_all, self._pids)  # at exit, should close() be skipped
        for index in range(settings.num_actors):
            self.actors.append(self._start(index))
        if settings.borrow_idle_cores:
            lend_idle_actors(self.idle)

    # ----- processes ----------------------------------------------------------------------------------------
    def _start(self, index: int, generation: int | None = None, carried: int = 0) -> _Actor:
        """Start actor ``index`` as a fresh process with the newest weights. Its slots are all free, but for one
        per rollout ``carried`` from the actor it replaces: handed over as those are taken, so that no more than
        ``max_policy_lag`` rollouts are ever ahead of the learner (the lag bound, ``worker.py``)."""
        s = self.settings
        generation = self.generation if generation is None else generation
        spec = actor_spec(s, self.env, self.policy, self.recipe(), index, generation, os.getpid())
        learner_end, actor_end = self.context.Pipe(duplex=True)
        free = s.max_policy_lag - min(carried, s.max_policy_lag)
        for slot in range(free):
            learner_end.send(slot)
        self.heartbeat[index] = 0.0  # starting: judged by STARTUP_TIMEOUT_S until its first beat
        self.idle[index] = 0  # a replaced actor may have died waiting
        self._started[index] = time.monotonic()
        channels = ActorChannels(self.weights, actor_end, self.heartbeat, self.stop_flag, self.idle)
        process = self.context.Process(target=actor_main, args=(spec, channels), daemon=True, name=f"actor-{index}")
        with child_environ(OMP_NUM_THREADS="1", **server_environ()):  # read as the first actor starts its interpreter
            process.start()
        actor_end.close()  # the child holds its own copy: EOF here once it dies
        if index < len(self._pids):
            self._pids[index] = process.pid
        else:
            self._pids.append(process.pid)
        return _Actor(spec, process, learner_end, free_slots=free, held_slots=list(range(free, s.max_policy_lag)))

    @property
    def pids(self) -> list[int]:
        """The live actors' process ids."""
        return [actor.process.pid for actor in self.actors]

    def _replace(self, index: int, problem: str) -> None:
        """Kill actor ``index`` (whatever state it is in) and start it again, or raise after too many failures."""
        old = self.actors[index]
        kill_pid(old.process.pid)
        old.process.join(JOIN_TIMEOUT_S)
        old.pipe.close()
        failures = old.failures_in_a_row + 1
        if old.free_slots > 0:  # it had a free slot: it was collecting into it (or about to)
            self.lost_rollouts += 1  # how far it got is unknown: no env steps are counted for it
        if failures >= self.settings.max_failures:
            raise failed_too_often(self.settings, self.env, index, failures, problem)
        self.generation += 1
        self.restarts += 1
        announce_replacement(index, problem, self.restarts, len(old.waiting))
        fresh = self._start(index, self.generation, carried=len(old.waiting))
        fresh.failures_in_a_row = failures
        fresh.waiting = old.waiting  # finished whole before it failed: still good data
        self.actors[index] = fresh

    def _check_health(self) -> None:
        """Replace actors that died or stopped beating (an actor that raised has said so on the queue first)."""
        now = time.monotonic()
        for index, actor in enumerate(self.actors):
            if not actor.process.is_alive():
                self._receive(actor)  # its last words, if any, name the error
                if self.actors[index] is actor:
                    self._replace(index, _exit_cause(actor.process.exitcode))
                continue
            beat = float(self.heartbeat[index])
            if beat == 0.0 and now - self._started[index] > STARTUP_TIMEOUT_S:
                self._replace(index, f"actor did not start within {STARTUP_TIMEOUT_S:g} s")
            elif beat > 0.0 and now - beat > self.settings.heartbeat_timeout_s:
                self._replace(index, f"no heartbeat for {self.settings.heartbeat_timeout_s:g} s (hung env?)")

    def _receive(self, actor: _Actor) -> bool:
        """Handle every message waiting on ``actor``'s pipe; ``False`` once the pipe is closed (the actor died)."""
        try:
            while actor.pipe.poll():
                self._handle(actor.pipe.recv())
                if self.actors[actor.spec.index] is not actor:
                    return True
        except (EOFError, OSError):
            return False
        return True

    # ----- data ---------------------------------------------------------------------------------------------
    def publish(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Make the learner's weights of ``version`` the ones every actor collects its next rollout with.

        An unchanged version is sent again when its tensors moved all the same (acting buffers such as SPO's
        observation normaliser, updated by ``process_rollout`` before any gradient step): the actors act with them,
        and their rollouts keep the tag ``version`` (the lag counts gradient steps, ``SharedWeights``)."""
        self.weights.publish(state_dict, version)

    def next_rollout(self, learner_version: int) -> ActorRollout:
        """Wait for one rollout from every actor, no more than ``max_policy_lag`` versions behind
        ``learner_version``; returns them side by side (columns in actor order)."""
        start = time.perf_counter()
        dropped_before = self.dropped_rollouts
        parts: list[TensorDict] = []
        infos: list[RolloutInfo] = []
        for index in range(len(self.actors)):
            batch, info = self._take(index, learner_version)
            parts.append(batch)
            infos.append(info)
        stale = self.dropped_rollouts - dropped_before  # collected whole: their env steps count
        if self.settings.borrow_idle_cores:
            follow_actors(step=False)  # the actors collect again: the update starts on the learner's own threads
        return self._gathering.rollout(
            parts, infos, stale, self.restarts, self.dropped_rollouts, start, lost=self.lost_rollouts
        )

    def _take(self, index: int, learner_version: int) -> tuple[TensorDict, RolloutInfo]:
        """Actor ``index``'s oldest fresh-enough rollout, cloned out of its slot (which is then free again)."""
        while True:
            actor = self.actors[index]
            if actor.waiting:
                finished = actor.waiting.popleft()
                batch = finished.data.clone()
                self._free(actor, finished)
                version = finished.info[0]
                if learner_version - version <= self.settings.max_policy_lag:
                    actor.failures_in_a_row = 0
                    return batch, finished.info
                self.dropped_rollouts += 1  # too stale for the update: its env steps still count
                continue
            with learner_waiting():  # background work of the learner (GameEvaluation) may run meanwhile
                ready = wait([actor.pipe], timeout=POLL_S)
            if ready and self._receive(actor):
                continue
            stop.check()  # SIGTERM / Ctrl+C: the learner stops here; close() then ends the actors
            self._check_health()

    def _free(self, actor: _Actor, finished: _Finished) -> None:
        """Hand ``finished``'s slot back to the actor that wrote it; for a rollout kept from a replaced actor, hand
        the new one a slot of its own it was held back. A pipe broken by an actor that just died is left to the
        health check, which replaces it."""
        if not actor.process.is_alive():
            return  # a dead actor's pipe may still take the message (its end can outlive it): nobody would read it
        if finished.generation == actor.spec.generation:
            slot = finished.slot
        elif actor.held_slots:
            slot = actor.held_slots.pop(0)
        else:
            return
        self.idle[actor.spec.index] = 0  # it collects again from now on (it clears the flag itself once it wakes)
        try:
            actor.pipe.send(slot)
        except OSError:  # BrokenPipeError: it died since; _check_health replaces it
            return
        actor.free_slots += 1

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind, index, generation = message[:3]
        actor = self.actors[index]
        if generation != actor.spec.generation:
            return  # from an actor already replaced (its pipe closed: nothing arrives once it is)
        if kind == "slots":
            actor.slots = message[3]
        elif kind == "rollout":
            slot, info = message[3], tuple(message[4:])
            assert actor.slots is not None, "a rollout before its slots"
            actor.waiting.append(_Finished(slot, actor.slots[slot], generation, info))  # type: ignore[arg-type]
            actor.free_slots -= 1
        elif kind == "error":
            self._replace(index, message[3])

    # ----- shutdown -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Tell every actor to stop, join each with a timeout, kill stragglers by pid. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self.settings.borrow_idle_cores:
            stop_lending()
        self.stop_flag.fill_(1)
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for actor in self.actors:
            actor.process.join(max(deadline - time.monotonic(), 0.0))
        ActorPool._kill_all([actor.process.pid for actor in self.actors])
        for actor in self.actors:
            actor.process.join(JOIN_TIMEOUT_S)
            actor.pipe.close()
        self._finalizer.detach()  # every actor is joined: a pid reused after this is not ours to kill at exit

    @staticmethod
    def _kill_all(pids: list[int]) -> None:
        for pid in pids:
            if pid is not None and pid_alive(pid):
                kill_pid(pid)


def _exit_cause(code: int | None) -> str:
    """How an actor process ended, as the replacement line says it (``-9``: killed by SIGKILL)."""
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"actor process killed by {signal.Signals(-code).name}"
    return f"actor process exited with code {code}"
