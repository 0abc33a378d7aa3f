"""``FinishedEpisodes``: mean return and length of the episodes that ended, synced over ranks, without host syncs."""

from __future__ import annotations

import torch
from torchmetrics import SumMetric


class FinishedEpisodes:
    """Accumulates sums over finished episodes; ``compute`` returns their means (NaN when none finished).

    Plain sums, not ``MeanMetric(weights)``: with ``nan_strategy="disable"`` (the only strategy that does not read
    tensors back to drop NaNs) torchmetrics 1.9 ignores the weights, which would average every env's running
    episode instead of the finished ones.
    """

    def __init__(self, device: torch.device) -> None:
        self._sums = {name: SumMetric(nan_strategy="disable").to(device) for name in ("return", "length", "count")}

    def update(self, returns: torch.Tensor, lengths: torch.Tensor, done: torch.Tensor) -> None:
        """Add the episodes flagged in ``done`` (any shape; ``returns``/``lengths`` broadcast to it)."""
        weight = done.float()
        self._sums["return"].update((returns * weight).sum())
        self._sums["length"].update((lengths * weight).sum())
        self._sums["count"].update(weight.sum())

    @property
    def updated(self) -> bool:
        """``update`` was called since the last ``reset`` (a host-side count: no sync)."""
        return self._sums["count"].update_count > 0

    def compute(self) -> dict[str, torch.Tensor]:
        """``episode_return``/``episode_length`` means since the last ``reset`` (synced over ranks)."""
        count = self._sums["count"].compute()
        return {
            "episode_return": self._sums["return"].compute() / count,
            "episode_length": self._sums["length"].compute() / count,
        }

    def count(self) -> torch.Tensor:
        """Episodes finished since the last ``reset`` (synced over ranks)."""
        return self._sums["count"].compute()

    def reset(self) -> None:
        """Start new sums (torchmetrics allocates new state tensors on the current stream)."""
        for metric in self._sums.values():
            metric.reset()

    def tensors(self) -> list[torch.Tensor]:
        """The state tensors ``update`` adds into, for cross-stream hand-offs (``StreamHandOff.keep_*``)."""
        return [state for metric in self._sums.values() for state in metric.metric_state.values()]


class FinishedGames:
    """Mean raw score of the Atari games that ended (``keys.GAME_OVER``), synced over ranks, without host syncs.

    Under an Atari preset's training form an episode is one life with clipped rewards; a game's raw score over all
    its lives (``keys.GAME_SCORE``) is what published curves plot (CleanRL logs it from below those wrappers).
    """

    def __init__(self, device: torch.device) -> None:
        self._sums = {name: SumMetric(nan_strategy="disable").to(device) for name in ("score", "count")}

    def update(self, scores: torch.Tensor, over: torch.Tensor) -> None:
        """Add the games flagged in ``over`` (``scores`` is 0 elsewhere)."""
        weight = over.float()
        self._sums["score"].update((scores * weight).sum())
        self._sums["count"].update(weight.sum())

    def compute(self) -> dict[str, torch.Tensor]:
        """``game_score``: the mean since the last ``reset`` (NaN when no game ended)."""
        return {"game_score": self._sums["score"].compute() / self._sums["count"].compute()}

    def count(self) -> torch.Tensor:
        """Games finished since the last ``reset`` (synced over ranks)."""
        return self._sums["count"].compute()

    def reset(self) -> None:
        for metric in self._sums.values():
            metric.reset()
