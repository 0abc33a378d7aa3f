"""The learner's torch threads, lent the cores of actor processes that wait for it (``data.borrow_idle_actor_cores``).

An actor process beside the learner holds a core while it collects and idles once it has collected what the lag bound
allows (``max_policy_lag`` rollouts ahead): it then waits for the learner's next update to free a slot. On a machine
whose cores the two share (2 cores: the learner at ``num_threads: 1`` and one actor), the second core then sits idle
for the rest of the update. ``follow_actors`` is called at every optimiser step of the learner: it runs the learner's
own threads plus one per actor waiting at that moment, and gives them back as soon as the actor collects again. The
actors flag their waits in a shared-memory tensor (``ActorPool``), so a step reads them without a message or a lock.

Intra-op thread counts change how some float sums split, so with lending on an update's last bits may depend on the
timing (never which rows it learns from, nor in what order).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch


@dataclass
class _Lending:
    idle: torch.Tensor  # [num_actors] int8, shared: 1 while an actor waits for the learner
    own: int  # the learner's own intra-op threads
    most: int  # never more threads than this process may run on cores
    steps: int = 0
    threads: int = 0  # threads summed over ``steps`` optimiser steps


_lending: _Lending | None = None


def lend_idle_actors(idle: torch.Tensor) -> None:
    """From now on ``follow_actors`` adds a thread per set flag of ``idle`` to the learner's current thread count."""
    global _lending
    _lending = _Lending(idle, torch.get_num_threads(), len(os.sched_getaffinity(0)))


def stop_lending() -> None:
    """Back to the learner's own thread count; ``follow_actors`` does nothing until the next ``lend_idle_actors``."""
    global _lending
    if _lending is not None:
        torch.set_num_threads(_lending.own)
    _lending = None


def follow_actors(step: bool = True) -> None:
    """At an optimiser step of the learner (``step``; or when it has just handed the actors their slots): run its own
    threads plus one per actor waiting for it, at most one per core. Nothing without ``lend_idle_actors``."""
    lending = _lending
    if lending is None:
        return
    threads = min(lending.own + int(lending.idle.count_nonzero()), lending.most)
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    if step:
        lending.steps += 1
        lending.threads += threads


def mean_threads_since_last_read() -> float | None:
    """The learner's mean intra-op threads over the optimiser steps since the last call (``perf/learner_threads``);
    None when nothing is lent or no step was taken."""
    lending = _lending
    if lending is None or lending.steps == 0:
        return None
    mean = lending.threads / lending.steps
    lending.steps = lending.threads = 0
    return mean
