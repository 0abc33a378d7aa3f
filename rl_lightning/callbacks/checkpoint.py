"""``RLCheckpoint``: Lightning's ``ModelCheckpoint`` with a cadence on the RL clock (updates or env steps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from typing_extensions import override

from rl_lightning.callbacks.cadence import Cadence
from rl_lightning.errors import ConfigError


class RLCheckpoint(ModelCheckpoint):
    """Saves every ``every_n_updates`` updates or ``every_n_env_steps`` env steps, and at the end of training.

    Lightning's own ``every_n_train_steps`` counts optimiser steps (``global_step``), which under PPO's many
    optimiser steps per update (and ``target_kl`` early stops) is no stable clock. Everything else (``monitor``,
    ``save_top_k``, ``save_last``, ``dirpath``, ``filename``) is ``ModelCheckpoint``'s. Fires in
    ``on_train_batch_end``, after the ``Evaluation`` callback (Lightning runs checkpoint callbacks last).

    Args:
        every_n_updates: save after every this many learner updates.
        every_n_env_steps: save each time the env-step counter crosses a multiple of this.
        **kwargs: passed to ``ModelCheckpoint`` (not its ``every_n_*``/``train_time_interval`` triggers).
    """

    def __init__(self, every_n_updates: int | None = None, every_n_env_steps: int | None = None, **kwargs: Any):
        cadence = Cadence("RLCheckpoint", every_n_updates, every_n_env_steps)
        for name in ("every_n_train_steps", "every_n_epochs", "train_time_interval"):
            if kwargs.get(name):
                raise ConfigError(f"RLCheckpoint: {name} is not supported; use every_n_updates or every_n_env_steps")
        if kwargs.get("save_last") is None:  # the CLI passes ``save_last: null`` when a YAML leaves it out
            kwargs["save_last"] = True
        if kwargs.get("filename") is None:  # the CLI passes every ModelCheckpoint argument, ``filename: null`` too
            kwargs["filename"] = "{env_steps:.0f}"  # env_steps=N.ckpt: the RL clock, not optimiser steps
        super().__init__(every_n_train_steps=0, every_n_epochs=0, **kwargs)
        self.every_n_updates = every_n_updates
        self.every_n_env_steps = every_n_env_steps
        self.cadence = cadence
        self._stage = "fit"

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(
            monitor=self.monitor,
            mode=self.mode,
            every_n_updates=self.every_n_updates,
            every_n_env_steps=self.every_n_env_steps,
            filename=self.filename,
        )

    def should_save(self, pl_module: Any) -> bool:
        """Cadence predicate: true once per crossing of the counter (never on a cycle that made no update)."""
        return self.cadence.due(pl_module)

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        due = self.should_save(pl_module)  # first: the cadence records every counter value it is shown
        if self._should_skip_saving_checkpoint(trainer) or not due:
            return
        self.save_now(trainer, pl_module)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        if not self._should_skip_saving_checkpoint(trainer) and pl_module.updates > 0:
            self.save_now(trainer, pl_module)

    def save_now(self, trainer: pl.Trainer, pl_module: Any) -> None:
        candidates = self._monitor_candidates(trainer)
        if self.monitor is None or self.monitor in candidates:
            self._save_topk_checkpoint(trainer, candidates)
        self._save_last_checkpoint(trainer, candidates)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "cadence": self.cadence.state_dict()}

    @override
    def setup(self, trainer: pl.Trainer, pl_module: Any, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._stage = stage

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved checkpoints' record for a resumed fit. ``validate``/``test`` save nothing, and Lightning
        restores callbacks there too: restoring would only warn that their log folder is not the fit's.

        A resumed fit logs to a new version of the same run (``version_1/checkpoints`` beside ``version_0``), so the
        folder differs by design: as Lightning does then, only ``best_model_path`` is restored (the top-k record
        starts afresh in the new folder and never deletes the earlier version's files), without Lightning's
        "dirpath has changed" warning, which is kept for a checkpoint from anywhere else.
        """
        if self._stage != "fit":
            return
        if _new_version_of_the_same_run(state_dict.get("dirpath"), self.dirpath):
            self.best_model_path = state_dict["best_model_path"]
        else:
            super().load_state_dict(state_dict)
        if "cadence" in state_dict:
            self.cadence.load_state_dict(state_dict["cadence"])


def _new_version_of_the_same_run(saved: str | None, current: str | None) -> bool:
    """Whether ``current`` is ``<run>/<other version>/<same folder>`` of the ``saved`` ``<run>/<version>/<folder>``."""
    if saved is None or current is None or saved == current:
        return False
    before, now = Path(saved).resolve(), Path(current).resolve()
    return before.name == now.name and before.parent.parent == now.parent.parent
