"""``RayActor``: the body of one Ray actor (``RayActorPool`` makes it ``ray.remote``): an ``ActorCore`` driven by
method calls instead of pipes and shared memory.

Protocol with the learner (``RayActorPool``); Ray runs one actor's calls one at a time, in the order sent:

    learner                                          actor i
    ray.put(weights of v) once per version (again if v's tensors moved: put number n)
    collect.remote(v, n, [ref])  ────────────────▶   n is not what it holds: ray.get(ref), copy into its module
                              ◀── object store ───   ("rollout", batch, stats, collect_s, load_s)
                              ◀── object store ───   ("error", one line) when anything raised (then it is killed)

The reference travels inside a list so Ray does not fetch the weights for every call, only when a new put arrives.
Rollouts are tagged with ``v``, the version the lag counts.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from rl_lightning.data.actors.core import ActorCore
from rl_lightning.data.actors.worker import ActorSpec, describe_error


class RayActor:
    """One actor's envs, collector and module copy, living in a Ray worker process (one CPU).

    Args:
        spec: the actor's ``ActorSpec`` (the same seeds and recipe as a process actor's).
    """

    def __init__(self, spec: ActorSpec) -> None:
        torch.set_num_threads(1)  # one intra-op thread per actor, as the process actors
        self.spec = spec
        self.core = ActorCore(spec)
        self.loaded_put = 0  # the learner's put number of the weights this actor holds (0: none yet)

    def collect(self, version: int, put: int, weights: list[Any]) -> tuple[Any, ...]:
        """One rollout with the weights of ``version``, put as the learner's ``put``-th (``weights[0]`` is their
        object reference)."""
        try:
            started = time.perf_counter()
            if put != self.loaded_put:
                import ray  # in the Ray worker process only

                state = ray.get(weights[0])
                torch._foreach_copy_([self.core.weights[name] for name in state], list(state.values()))
                self.core.loaded(version)
                self.loaded_put = put
            load_s = time.perf_counter() - started
            batch, stats, collect_s = self.core.collect()
            return ("rollout", batch, stats, collect_s, load_s)
        except Exception as err:  # noqa: BLE001 - reported to the learner, which replaces this actor
            return ("error", describe_error(err, self.spec))

    def where(self) -> tuple[str, int]:
        """``(node id, process id)`` of this actor, for tests and diagnostics."""
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()
