"""``EarlyStopping`` that checks right after each evaluation instead of at (never-ending) epoch ends."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import EarlyStopping as LightningEarlyStopping
from typing_extensions import override

from rl_lightning.callbacks.evaluation import Evaluation


class EarlyStopping(LightningEarlyStopping):
    """Lightning's ``EarlyStopping`` (``monitor``, ``mode``, ``patience``, ``stopping_threshold``, ...) for RL runs.

    RL epochs never end, so the check runs in ``on_train_batch_end`` whenever an ``Evaluation`` callback listed
    before this one has just evaluated; ``patience`` then counts evaluations. Example: stop once
    ``eval/episode_return`` reaches 475 with ``monitor="eval/episode_return", mode="max", stopping_threshold=475``.
    """

    def __init__(self, monitor: str = "eval/episode_return", mode: str = "max", **kwargs: Any) -> None:
        kwargs.setdefault("check_on_train_epoch_end", False)
        super().__init__(monitor=monitor, mode=mode, **kwargs)
        self._last_checked_updates = -1

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._just_evaluated(trainer, pl_module):
            self._last_checked_updates = pl_module.updates
            self._run_early_stopping_check(trainer)

    @staticmethod
    def _just_evaluated(trainer: pl.Trainer, pl_module: Any) -> bool:
        return any(isinstance(cb, Evaluation) and cb.last_updates == pl_module.updates for cb in trainer.callbacks)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        return
