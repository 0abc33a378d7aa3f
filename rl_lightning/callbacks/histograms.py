"""``Histograms``: distributions of an update's tensors in TensorBoard's Histograms tab, every N updates."""

from __future__ import annotations

import importlib
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from rl_lightning.algos.base import RLModule
from rl_lightning.algos.histograms import FIELD, histograms_check
from rl_lightning.callbacks.cadence import Cadence
from rl_lightning.errors import ConfigError, check_fields
from rl_lightning.networks.normalizers import RunningMeanStd


class Histograms(Callback):
    """Writes the module's ``histogram_tensors()`` and its normalisers' statistics as TensorBoard histograms.

    Fires in ``on_train_batch_end`` each time the module's ``updates`` counter crosses a multiple of
    ``every_n_updates`` (``Cadence``: a step without an update, e.g. replay prefill, never fires), at
    x = ``env_steps``, the step of that update's scalars. What is written: PPO and RecurrentPPO the rollout's
    ``rollout/advantage``, ``rollout/return``, ``rollout/value`` and the updated policy's ``policy/logits`` or
    ``policy/mean`` and ``policy/log_std``; SPO its search's ``search/weights``, ``search/advantages``,
    ``search/root_value`` and the prior's outputs; DreamerV3 the last gradient step's ``imagination/return``,
    ``imagination/value``, ``imagination/advantage``; every module the ``normalizer/<name>/mean`` and ``/var`` of
    each running normaliser it has (``normalize_obs``, ``normalize_reward``). A module without
    ``histogram_tensors`` (BC) is refused at setup, and so is a run without a ``TensorBoardLogger`` (CSV and
    MLflow have no histograms: refused in one line rather than skipped, so asking for them is never a no-op).

    Usually attached by ``rl-lightning`` for ``model.histograms_every_n_updates`` (the module builds no callback;
    a Trainer built in Python lists it, and the module refuses the setting without it). While it
    runs the module keeps a reference to each update's data until this callback's hook drops it (same step): no
    copy, no host sync; on the due updates the policy forward over the rollout and the histograms' read-back run
    on rank 0 (its own rollout) only. Non-finite values are left out of a histogram, with a one-time warning.

    Args:
        every_n_updates: write after every this many learner updates (>= 1).
    """

    def __init__(self, every_n_updates: int) -> None:
        self.cadence = Cadence("Histograms", every_n_updates, None)
        self._warned: set[str] = set()

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        name = type(pl_module).__name__
        if not supports_histograms(pl_module):
            raise ConfigError(f"Histograms: {name} has no histogram_tensors(); remove the Histograms callback")
        if not any(isinstance(logger, TensorBoardLogger) for logger in trainer.loggers):
            found = ", ".join(type(logger).__name__ for logger in trainer.loggers) or "none"
            raise ConfigError(f"Histograms: {no_tensorboard_fix(found)}")
        pl_module.keep_histogram_source = True

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        try:
            if self.cadence.due(pl_module) and trainer.is_global_zero:
                self.write(trainer, pl_module)
        finally:
            pl_module.histogram_source = None  # the update's data is not kept past its step

    @torch.no_grad()
    def write(self, trainer: pl.Trainer, pl_module: Any) -> None:
        """Write every histogram tensor of the last update at its env step to each TensorBoard logger."""
        if pl_module.histogram_source is None:  # a module that kept nothing for this update: say so once
            if "" not in self._warned:
                self._warned.add("")
                rank_zero_warn(f"Histograms: {type(pl_module).__name__} kept no data for update {pl_module.updates}")
            return
        tensors = {**pl_module.histogram_tensors(), **normalizer_tensors(pl_module)}
        step = int(pl_module.env_steps)
        values = {tag: self._finite(tag, tensor, step) for tag, tensor in tensors.items()}
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                for tag, value in values.items():
                    if value.numel():
                        logger.experiment.add_histogram(tag, value, global_step=step)

    def _finite(self, tag: str, tensor: torch.Tensor, step: int) -> torch.Tensor:
        """``tensor``'s finite values as a flat float64 CPU tensor (one host copy per tag, on due updates only)."""
        flat = tensor.detach().reshape(-1).double().cpu()
        finite = flat[flat.isfinite()]
        if finite.numel() < flat.numel() and tag not in self._warned:
            self._warned.add(tag)
            rank_zero_warn(
                f"Histograms: {tag} has {flat.numel() - finite.numel()} non-finite values at env step {step}; "
                "its histograms show the finite ones"
            )
        return finite

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        pl_module.keep_histogram_source = False
        pl_module.histogram_source = None

    @override
    def state_dict(self) -> dict[str, Any]:
        return self.cadence.state_dict()

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.cadence.load_state_dict(state_dict)


def supports_histograms(module: Any) -> bool:
    """Whether ``module`` overrides ``RLModule.histogram_tensors`` (what the ``Histograms`` callback writes)."""
    method = getattr(type(module), "histogram_tensors", None)
    return method is not None and method is not RLModule.histogram_tensors


def normalizer_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``normalizer/<name>/mean`` and ``/var`` of each ``RunningMeanStd`` in ``module`` (per observation key of a
    ``Dict`` observation: ``normalizer/obs_normalizer/<key>/mean``)."""
    out = {}
    for name, sub in module.named_modules():
        if isinstance(sub, RunningMeanStd):
            tag = "normalizer/" + name.removesuffix(".rms").replace(".normalizers.", "/").replace(".", "/")
            out[f"{tag}/mean"], out[f"{tag}/var"] = sub.mean, sub.var
    return out


def no_tensorboard_fix(found: str) -> str:
    """The refusal's reason and fix when histograms are asked for without a TensorBoard logger."""
    return (
        f"histograms are written to TensorBoard, and trainer.logger has no TensorBoardLogger (found: {found}); add "
        "lightning.pytorch.loggers.TensorBoardLogger to trainer.logger (a list may hold several loggers) or turn "
        f"histograms off (model.{FIELD}: null)"
    )


def check_histograms_config(config: Any) -> None:
    """``fit`` from the CLI, before anything is built: refuse, in one line, a bad ``model.histograms_every_n_updates``
    or histograms asked for (that setting or a ``Histograms`` callback) without a TensorBoard logger."""
    every = config.get(f"model.init_args.{FIELD}")
    check_fields([histograms_check(every)], {FIELD: every})
    callbacks = config.get("trainer.callbacks") or []
    listed = any(str(_get(cb, "class_path")).rsplit(".", 1)[-1] == "Histograms" for cb in callbacks)
    if every is None and not listed:
        return
    logger = config.get("trainer.logger")
    entries = logger if isinstance(logger, list) else [logger]
    if logger is True or any(_is_tensorboard(_get(entry, "class_path")) for entry in entries):
        return  # True: Lightning's default logger, TensorBoard where installed (the callback checks the instance)
    found = ", ".join(str(_get(e, "class_path")).rsplit(".", 1)[-1] for e in entries if e not in (None, False))
    source = f"model.{FIELD}={every}" if every is not None else "trainer.callbacks: Histograms"
    raise ConfigError(f"{source}: {no_tensorboard_fix(found or 'none')}")


def _is_tensorboard(class_path: Any) -> bool:
    if not isinstance(class_path, str) or "." not in class_path:
        return False
    module_name, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name, None)
    except ImportError:
        return False  # the logger's own instantiation reports it
    return isinstance(cls, type) and issubclass(cls, TensorBoardLogger)


def _get(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        return node.get(key)
    return getattr(node, key, None)
