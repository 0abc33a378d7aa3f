"""``EnvStepProgressBar``: a tqdm bar that counts env steps against the budget and shows SPS and recent return
(behaviour cloning, which steps no env, counts the training rows it has seen against its epochs' worth)."""

from __future__ import annotations

import sys
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm
from typing_extensions import override

_SHOWN = {
    "rollout/episode_return": "return",
    "eval/episode_return": "eval",
    "perf/env_sps": "sps",
    "updates": "updates",
    "train/loss": "loss",
}


class EnvStepProgressBar(TQDMProgressBar):
    """Progress in env steps (total = ``data.total_env_steps`` rounded up to whole rollouts, where the run stops),
    with SPS, recent return and eval return.

    The CLI installs it in place of Lightning's bar, whose total counts optimiser steps. The bar is made once, as
    training starts, already at the env-step count a resumed run restored and labelled "Training" (Lightning's bar is
    reset to batches and relabelled "Epoch N" at each epoch start: a resumed async run drew one frame at
    ``0 < initial`` steps, a negative rate); tqdm's rate and ETA count only the steps of this session. A validation
    or test loop of one batch (``validate``/``test`` of an RL module: one evaluation) draws no bar, which could only
    show ``0/1`` then ``1/1``; behaviour cloning's held-out batches keep Lightning's.

    Args:
        refresh_rate: redraw every this many updates.
    """

    @override
    def init_train_tqdm(self) -> Tqdm:
        unit, done, total = progress(self.trainer)
        return Tqdm(
            desc=self.train_description, position=2 * self.process_position, disable=self.is_disabled, leave=True,
            dynamic_ncols=True, file=sys.stdout, smoothing=0, bar_format=self.BAR_FORMAT,
            total=total, initial=done, unit=unit,
        )  # fmt: skip

    @override
    def init_validation_tqdm(self) -> Tqdm:
        return Tqdm(disable=True) if sum(self.trainer.num_val_batches) <= 1 else super().init_validation_tqdm()

    @override
    def init_test_tqdm(self) -> Tqdm:
        return Tqdm(disable=True) if sum(self.trainer.num_test_batches) <= 1 else super().init_test_tqdm()

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        if self._leave:  # a bar per epoch, as Lightning's ``leave=True`` keeps one per epoch
            self.train_progress_bar = self.init_train_tqdm()

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
    """``(unit, done, total)`` the bar shows: env steps against ``data.total_env_steps``, or, for a module that learns
    from recorded rows (BC: ``samples``), the rows seen against ``max_epochs`` times the training rows."""
    module = trainer.lightning_module
    if hasattr(module, "samples"):
        rows = getattr(trainer.datamodule, "train_rows", None)
        epochs = trainer.max_epochs
        total = epochs * len(rows) if rows is not None and epochs is not None and epochs > 0 else None
        return " samples", int(module.samples), total
    datamodule = trainer.datamodule
    total = getattr(datamodule, "budget_env_steps", getattr(datamodule, "total_env_steps", None))
    return " env steps", int(getattr(module, "env_steps", 0)), total
