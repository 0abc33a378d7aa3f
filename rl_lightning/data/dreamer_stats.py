"""What one ``DreamerDataModule`` cycle logs beside ``rollout/*``: ``replay/*`` (the ring's fill and the replay ratio
achieved against the one asked for) and ``perf/*`` (how much of the actor window the update hid, each side's busy
fraction), and the async engine's read of the last window's episode stats."""

from __future__ import annotations

from typing import Any

import torch

from rl_lightning.data.replay import ReplayRing
from rl_lightning.data.stream_handoff import StreamHandOff


def replay_stats(
    replay: ReplayRing, world_size: int, gradient_steps: int, trained_steps: int, ratio: float
) -> dict[str, torch.Tensor]:
    """``replay/*``: rows held over all ranks, the fill, the commit head, and gradient steps per policy step since
    training started (``trained_steps`` of this rank) beside ``ratio``."""
    return {
        "replay/size": torch.tensor(float(len(replay) * world_size)),
        "replay/fill": torch.tensor(replay.size / replay.capacity),
        "replay/committed_t": torch.tensor(float(replay.committed_t)),
        "replay/ratio_actual": torch.tensor(gradient_steps / max(trained_steps, 1)),
        "replay/ratio_requested": torch.tensor(float(ratio)),
    }


def timing_stats(actor_ms: float | None, learner_ms: float | None, cycle_ms: float | None) -> dict[str, torch.Tensor]:
    """``perf/actor_ms`` once an actor window has been timed (``PhaseTimer.poll``), and
    ``overlap_stats`` once the learner's update and the whole cycle are timed too."""
    stats = {} if actor_ms is None else {"perf/actor_ms": torch.tensor(actor_ms)}
    if actor_ms is not None and learner_ms is not None and cycle_ms is not None:
        stats.update(overlap_stats(actor_ms, learner_ms, cycle_ms))
    return stats


def overlap_stats(actor_ms: float, learner_ms: float, cycle_ms: float) -> dict[str, torch.Tensor]:
    """``perf/overlap_eff``: the share of the shorter side hidden behind the other in one cycle (1: fully
    overlapped, 0: serial), and each side's busy fraction of the cycle."""
    hidden = (actor_ms + learner_ms - cycle_ms) / max(min(actor_ms, learner_ms), 1e-6)
    return {
        "perf/overlap_eff": torch.tensor(min(max(hidden, 0.0), 1.0)),
        "perf/actor_busy": torch.tensor(min(actor_ms / max(cycle_ms, 1e-6), 1.0)),
        "perf/learner_busy": torch.tensor(min(learner_ms / max(cycle_ms, 1e-6), 1.0)),
    }


def read_window_episode_stats(collector: Any, handoff: StreamHandOff | None) -> dict[str, torch.Tensor]:
    """Async engine: episode stats of the last window, read and reset on the learner stream after ``acquire``.

    Read before this cycle's window, not after it: reading them after would make the learner's stream wait for
    the window and serialise the update behind it.
    """
    assert collector is not None
    assert handoff is not None
    sums = collector.finished
    if not sums.updated:  # no window yet (first cycle of a run or a resume): nothing to read or reset
        device = collector.env.device
        return {key: torch.full((), float("nan"), device=device) for key in ("episode_return", "episode_length")}
    handoff.keep_for_reader(sums.tensors())  # reset drops them while this stream may still read them
    stats = collector.episode_stats()
    handoff.keep_for_writer(sums.tensors())  # reset allocated them on this stream; the actor adds into them
    return stats
