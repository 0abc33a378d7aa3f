"""``FailFast``: stop a run at the first non-finite loss, gradient or weight, leaving a bundle that reproduces it."""

from __future__ import annotations

import copy
import importlib
import os
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from rl_lightning.errors import ConfigError
from rl_lightning.lineage import constructor_args


class FailFast(Callback):
    """Stops the run after the first update whose loss, grad norm or parameters are non-finite.

    After each update (``on_train_batch_end``) it tests the module's last logged ``train/*`` values and all
    parameters for NaN/inf with one host sync. On failure it writes ``failfast_bundle_rank{r}.pt`` (update, env
    steps, offending names, the rollout batch, weights, optimiser state and minibatch generator from just before
    the update, weights after it, module class and hyper-parameters) into the log dir, then raises
    ``FloatingPointError`` naming the file; ``reproduce(path)`` replays that update standalone. Nothing already
    written is touched, and the checkpoint callbacks (which Lightning runs last) never save the bad update.
    Config arithmetic (minibatches vs rollout, budget vs one update) is checked earlier, by the datamodule's
    ``setup`` before any env is built, so it holds with or without this callback.

    Args:
        check_every_n_updates: test every this many updates (1 = every update).
        bundle_dir: where to write the bundle (default: the trainer's log dir).
    """

    def __init__(self, check_every_n_updates: int = 1, bundle_dir: str | None = None) -> None:
        if check_every_n_updates < 1:
            raise ConfigError(f"FailFast: check_every_n_updates={check_every_n_updates} must be >= 1")
        self.check_every_n_updates = check_every_n_updates
        self.bundle_dir = bundle_dir
        self._before: dict[str, Any] | None = None

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._due(pl_module, offset=1):
            optimizer = pl_module.optimizers()
            self._before = {
                "weights": {k: v.detach().cpu().clone() for k, v in pl_module.state_dict().items()},
                "optimizer": copy.deepcopy(optimizer.optimizer.state_dict()),
                "generator": pl_module.generator.get_state(),
            }

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self._due(pl_module):
            return
        bad = self.non_finite(pl_module)
        if bad:
            path = self.write_bundle(trainer, pl_module, bad)
            raise FloatingPointError(
                f"FailFast: non-finite {', '.join(bad[:5])} at update {pl_module.updates} "
                f"(env step {pl_module.env_steps}); reproduction bundle: {path}"
            )
        self._before = None

    def _due(self, pl_module: Any, offset: int = 0) -> bool:
        return (pl_module.updates + offset) % self.check_every_n_updates == 0

    @staticmethod
    def non_finite(pl_module: Any) -> list[str]:
        """Names of logged ``train/*`` scalars and parameters that hold NaN or inf (one host sync)."""
        named: list[tuple[str, torch.Tensor]] = []
        for key, value in getattr(pl_module, "last_metrics", {}).items():
            if key.startswith("train/") and isinstance(value, torch.Tensor):
                named.append((key, value))
        named += [(f"param/{n}", p) for n, p in pl_module.named_parameters()]
        flags = torch.stack([~torch.isfinite(t.detach()).all() for _, t in named]).cpu()
        return [name for (name, _), flag in zip(named, flags.tolist()) if flag]

    def write_bundle(self, trainer: pl.Trainer, pl_module: Any, bad: list[str]) -> Path:
        directory = Path(self.bundle_dir or trainer.log_dir or trainer.default_root_dir)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"failfast_bundle_rank{trainer.global_rank}.pt"
        rollout = getattr(getattr(trainer.datamodule, "last_rollout", None), "batch", None)
        bundle = {
            "updates": pl_module.updates,
            "env_steps": pl_module.env_steps,
            "non_finite": bad,
            "metrics": dict(getattr(pl_module, "last_metrics", {}).items()),
            "batch": None if rollout is None else rollout.cpu(),
            "before": self._before_as_run(pl_module),
            "weights_after": {k: v.detach().cpu() for k, v in pl_module.state_dict().items()},
            "hparams": constructor_args(pl_module.hparams),
            "module_class": f"{type(pl_module).__module__}.{type(pl_module).__qualname__}",
        }
        tmp = path.with_suffix(".tmp")
        torch.save(bundle, tmp)
        os.replace(tmp, path)
        return path

    def _before_as_run(self, pl_module: Any) -> dict[str, Any] | None:
        """The pre-update state, with the optimiser's param-group settings (``lr``, ...) the update ran with.

        A module may set them inside ``training_step`` (PPO anneals ``lr`` there), after ``on_train_batch_start``
        took the snapshot; an update itself does not change them, so the current values are the ones it used.
        """
        if self._before is None:
            return None
        groups = copy.deepcopy(pl_module.optimizers().optimizer.param_groups)
        saved = self._before["optimizer"]["param_groups"]
        for old, used in zip(saved, groups):
            old.update({k: v for k, v in used.items() if k != "params"})
        return self._before


def replay(path: str | Path) -> Any:
    """Replay the failing update of a bundle standalone; returns the module after it (``last_metrics`` set).

    Rebuilds the module from the bundle's class and constructor arguments, restores the weights, optimiser state
    and minibatch generator from just before the update, and runs ``module.update`` on the saved rollout. The
    weights it ends with equal the bundle's ``weights_after``.
    """
    bundle = torch.load(path, weights_only=False)
    if bundle["before"] is None or bundle["batch"] is None:
        raise ConfigError(f"{path}: bundle lacks the pre-update state or the batch; it cannot be replayed")
    module_path, _, name = bundle["module_class"].rpartition(".")
    cls = getattr(importlib.import_module(module_path), name)
    module = cls(**constructor_args(bundle["hparams"], cls))
    module.load_state_dict(bundle["before"]["weights"])
    optimizer = module.configure_optimizers()
    optimizer.load_state_dict(bundle["before"]["optimizer"])
    module.generator.set_state(bundle["before"]["generator"])
    terms = module.update(bundle["batch"], optimizer)
    module.last_metrics = {f"train/{k}": v for k, v in terms.items()}
    return module


def reproduce(path: str | Path) -> list[str]:
    """Replay the failing update of a bundle (see ``replay``); returns the non-finite names it produces again.

    The names are those of the update's loss terms and of the parameters. Diagnostics a module computes outside
    ``update`` (PPO's ``train/explained_variance`` from the rollout) are in the bundle's ``non_finite`` only.
    """
    return FailFast.non_finite(replay(path))
