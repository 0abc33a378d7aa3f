"""Write scalars to the trainer's loggers once, at an env step: the x-axis of every curve (docs/guides/metrics.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch


def to_floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Python floats of scalar metrics, with one host sync for all tensors of a device (not one per metric)."""
    floats = {k: float(v) for k, v in metrics.items() if not isinstance(v, torch.Tensor)}
    by_device: dict[torch.device, list[str]] = {}
    for key, value in metrics.items():
        if isinstance(value, torch.Tensor):
            by_device.setdefault(value.device, []).append(key)
    for names in by_device.values():
        stacked = torch.stack([metrics[k].detach().reshape(()).double() for k in names])
        floats.update(zip(names, stacked.tolist()))
    return {k: floats[k] for k in metrics}


def finite_only(metrics: Mapping[str, float]) -> dict[str, float]:
    """Drop NaN values (e.g. an episode statistic of a rollout in which no episode finished)."""
    return {k: v for k, v in metrics.items() if not math.isnan(v)}


def publish_to_callbacks(trainer: pl.Trainer, scalars: Mapping[str, float]) -> None:
    """Make ``scalars`` current in ``trainer.callback_metrics``: what ``EarlyStopping``, ``ModelCheckpoint`` and the
    progress bar read, as ``LightningModule.log_dict(scalars, logger=False)`` in a training step would leave it.

    Not through ``self.log``: Lightning's result collection moves each logged key's metric object to the value's
    device on every call (``_ResultMetric.to`` walks the object's attributes), about 0.2 ms per key on CPU, so the
    ~16 metrics of a PPO update cost 3.8 ms, 10% of a CartPole training step (``benchmarks/NOTES.md``, PPO).
    ``trainer.callback_metrics`` is the live dict Lightning clears only when a run (or its sanity check) starts;
    the values go in as 0-dim float64 CPU tensors (exact env-step counters for checkpoint names past 2**24).
    """
    metrics = trainer.callback_metrics
    metrics.update({key: torch.tensor(value, dtype=torch.float64) for key, value in scalars.items()})


def log_at_env_step(trainer: pl.Trainer, scalars: Mapping[str, float], env_steps: int) -> None:
    """Write ``scalars`` to every logger of ``trainer`` as one point each at step ``env_steps``.

    The callers log the same values through ``LightningModule.log(..., logger=False)``, which feeds monitors
    (``ModelCheckpoint``, ``EarlyStopping``) and the progress bar but not the loggers. Lightning's logger path
    would re-send every on-step value logged earlier in the epoch with each later batch (an evaluation became
    one point per update), and writes epoch-end values at a batch-index step that TensorBoard takes for a
    restart. Loggers are rank-zero only, as in Lightning.
    """
    for logger in trainer.loggers:
        logger.log_metrics(dict(scalars), step=env_steps)
        logger.save()
