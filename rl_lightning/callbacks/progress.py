"""``EnvStepProgressBar``: a tqdm bar that counts env steps against the budget and shows SPS and recent return
(behaviour cloning, which steps no env, counts the training rows it has seen against its epochs' worth)."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import TQDMProgressBar
from typing_extensions import override

_SHOWN = {
    "rollout/episode_return": "return",
    "eval/episode_return": "eval",
    "perf/env_sps": "sps",
    "updates": "updates",
    "train/loss": "loss",
}


class EnvStepProgressBar(TQDMProgressBar):
    """Progress in env steps (total = ``data.total_env_steps`` in whole rollouts), with SPS, recent return and eval
    return.

    The CLI installs it in place of Lightning's bar, whose total counts optimiser steps. A resumed run starts the
    bar at the restored env-step count (Lightning resumes mid-epoch and skips ``on_train_epoch_start``), and
    tqdm's rate and ETA count only the steps of this session.

    Args:
        refresh_rate: redraw every this many updates.
    """

    @override
    def on_train_start(self, trainer: pl.Trainer, *_: Any) -> None:
        super().on_train_start(trainer)
        self._start_at_env_steps(trainer)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        super().on_train_epoch_start(trainer)
        self._start_at_env_steps(trainer)

    def _start_at_env_steps(self, trainer: pl.Trainer) -> None:
        bar = self.train_progress_bar
        unit, done, total = progress(trainer)
        bar.reset(total=total)
        bar.unit = unit
        bar.set_description("Training")
        bar.initial = bar.n = bar.last_print_n = done  # the rate counts this session's steps only
        bar.refresh()

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        bar = self.train_progress_bar
        if bar is None or bar.disable or (batch_idx + 1) % max(self.refresh_rate, 1) != 0:
            return
        bar.n = progress(trainer)[1]
        bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=True)

    @override
    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, int | str | float]:
        metrics = trainer.callback_metrics
        shown: dict[str, int | str | float] = {}
        for key, label in _SHOWN.items():
            if key in metrics:
                value = float(metrics[key])
                shown[label] = int(value) if label in ("sps", "updates") else f"{value:.3g}"
        return shown


def progress(trainer: pl.Trainer) -> tuple[str, int, int | None]:
    """``(unit, done, total)`` the bar shows: env steps against ``data.total_env_steps`` rounded up to whole rollouts
    (what the run collects: against the bare budget the last rollout ran past the total, which tqdm shows as ``?``),
    or, for a module that learns from recorded rows (BC: ``samples``), the rows seen against ``max_epochs`` times the
    training rows."""
    module = trainer.lightning_module
    if hasattr(module, "samples"):
        rows = getattr(trainer.datamodule, "train_rows", None)
        epochs = trainer.max_epochs
        total = epochs * len(rows) if rows is not None and epochs is not None and epochs > 0 else None
        return " samples", int(module.samples), total
    datamodule = trainer.datamodule
    budget = getattr(datamodule, "total_env_steps", None)
    per_update = getattr(datamodule, "rollout_size", 0) * getattr(datamodule, "world_size", 1)
    if budget is not None and per_update > 0:  # a run stops after the first whole rollout at or past the budget
        budget = -(-budget // per_update) * per_update
    return " env steps", int(getattr(module, "env_steps", 0)), budget
