"""The actor process: its own envs, collector and copy of the acting policy, writing rollouts into shared slots.

Protocol with the learner (``ActorPool``), all through ``ActorChannels``:

    learner                                    actor i
    publish(weights, v) ─── SharedWeights ───▶ before each rollout: newest weights (v)
    free slot j         ─── its pipe ────────▶ waits for a free slot, then collects T ticks with v
                        ◀── its pipe ──────── ("slots", ...) once: the shared TensorDicts, as handles
                        ◀── its pipe ──────── ("rollout", i, generation, j, v, stats, collect_s, wait_s)
    clone slot j, free j
                        ◀── its pipe ──────── ("error", i, generation, one line) when anything raises

An actor waits for a free slot *before* it reads the weights and collects, so a rollout is never collected ahead
of a slot: with ``L`` slots per actor no rollout is more than ``L`` versions behind the learner that uses it.
Each actor has its own pipe and nothing shared holds a lock (the stop flag and heartbeats are shared tensors), so
an actor killed at any instant cannot leave a lock held that the learner or another actor would wait on.
"""

from __future__ import annotations

import contextlib
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rl_lightning.data.actors.core import ActorCore, now
from rl_lightning.data.actors.policy_factory import PolicyFactory
from rl_lightning.data.actors.weights import SharedWeights
from rl_lightning.errors import EnvError
from rl_lightning.processes.child_processes import die_with_parent, pid_alive, signal_when_gone

POLL_S = 0.05


@dataclass
class ActorSpec:
    """Who actor ``index`` is and what it steps: everything it needs, picklable, sent once at start.

    Attributes:
        index: the actor's number; its envs are columns ``index·num_envs ...`` of the learner's rollout.
        generation: how many times this actor was (re)started before; part of its seeds.
        env: the env core (``TorchEnv``), copied into the process.
        num_envs: envs this actor steps.
        num_steps: ticks per rollout.
        env_seed: seeds the envs; ``sampling_seed`` the action sampling.
        check_env: validate every action; ``check_finite``: watch for NaN/inf observations and rewards.
        policy: builds the acting module.
        parent_pid: the learner's pid (the actor exits when it is gone).
        num_slots: shared rollout slots of this actor (the lag bound).
        recipe: what the actor builds its collector from (``recipes.py``).
        env_splits: 2 steps the envs in two groups, one while the policy acts for the other (``split.py``).
        autocast_dtype: act inside ``torch.autocast("cpu", autocast_dtype)`` (the learner's mixed precision), or None.
    """

    index: int
    generation: int
    env: Any
    num_envs: int
    num_steps: int
    env_seed: int
    sampling_seed: int
    check_env: bool
    check_finite: bool
    policy: PolicyFactory
    parent_pid: int
    num_slots: int
    recipe: Any
    env_splits: int = 1
    autocast_dtype: torch.dtype | None = None


@dataclass
class ActorChannels:
    """The shared objects between the learner and one actor.

    Attributes:
        weights: the learner's published weights.
        pipe: this actor's end of its duplex pipe (messages out, free slot numbers in).
        heartbeat: ``time.monotonic()`` of each actor's last sign of life (``[num_actors]`` float64, shared).
        stop: ``[1]`` int64, shared: the learner sets it to 1 to end every actor.
        idle: ``[num_actors]`` int8, shared: 1 while an actor waits for a free slot (it has collected what the lag
            bound allows); a learner that borrows idle actors' cores reads it (``learner_threads.py``).
    """

    weights: SharedWeights
    pipe: Any
    heartbeat: torch.Tensor
    stop: torch.Tensor
    idle: torch.Tensor


def actor_main(spec: ActorSpec, channels: ActorChannels) -> None:
    """Entry point of an actor process (forked by the fork server, or ``spawn``): set up, then collect until told to
    stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C reaches the whole process group: the learner decides
    # The learner's death kills it: an actor holds nothing a resume needs. Its parent is the learner (``spawn``) or the
    # fork server, which outlives the learner while any actor it forked lives; so the learner's pid is watched too.
    die_with_parent(signal.SIGKILL)
    signal_when_gone(spec.parent_pid, signal.SIGKILL)
    if not pid_alive(spec.parent_pid):  # the learner, not the parent: under the fork server the two differ
        return
    torch.set_num_threads(1)
    core: ActorCore | None = None
    failed = False
    try:
        core = ActorCore(spec, lambda: _beat(channels, spec.index))
        _collect_until_stopped(core, spec, channels)
    except _Stopped:
        pass
    except BaseException as err:  # noqa: BLE001 - every failure is reported to the learner, then the actor exits
        failed = True
        with contextlib.suppress(OSError):  # the learner may be gone already
            channels.pipe.send(("error", spec.index, spec.generation, describe_error(err, spec)))
    finally:
        if core is not None:  # after the report: an env whose close() hangs cannot hide the error behind it
            core.close()
    if failed:
        raise SystemExit(1)


def _beat(channels: ActorChannels, index: int) -> None:
    channels.heartbeat[index] = now()


def _collect_until_stopped(core: ActorCore, spec: ActorSpec, channels: ActorChannels) -> None:
    """Collect a rollout into each free slot the learner hands back, until told to stop (``_Stopped``)."""
    index = spec.index
    slots = None
    while True:
        waited = time.perf_counter()
        channels.idle[index] = 1
        slot = _wait(channels.pipe.recv, spec, channels, ready=lambda: channels.pipe.poll(POLL_S))
        channels.idle[index] = 0
        newer = channels.weights.read_into(core.weights, core.version)
        while newer is None and core.version < 0:  # the very first weights
            _wait(lambda: None, spec, channels, ready=lambda: time.sleep(POLL_S) is None)
            newer = channels.weights.read_into(core.weights, core.version)
        if newer is not None:
            core.loaded(newer)
        wait_s = time.perf_counter() - waited
        batch, stats, collect_s = core.collect()
        if slots is None:  # the layout is known after the first rollout: share it once
            slots = [batch.clone().share_memory_() for _ in range(spec.num_slots)]
            channels.pipe.send(("slots", index, spec.generation, slots))
        slots[slot].update_(batch)
        channels.pipe.send(("rollout", index, spec.generation, slot, core.version, stats, collect_s, wait_s))


class _Stopped(Exception):
    """The learner asked every actor to stop, or went away."""


def _wait(take: Callable[[], Any], spec: ActorSpec, channels: ActorChannels, ready: Callable[[], bool]) -> Any:
    """``take()`` once ``ready()`` (which waits up to ``POLL_S``) says so, beating the heart and watching for a
    stop in between."""
    while True:
        channels.heartbeat[spec.index] = now()
        if int(channels.stop[0]) or not pid_alive(spec.parent_pid):
            raise _Stopped
        if ready():
            return take()


def describe_error(err: BaseException, spec: ActorSpec) -> str:
    """One line naming the error and where it was raised (the learner prints it, with the env's name, when the
    actor fails too often); an ``EnvError`` already names the env and its index."""
    if isinstance(err, EnvError):
        return str(err)
    where = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
    at = f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where else ""
    return f"{type(err).__name__}: {err}{at}"
