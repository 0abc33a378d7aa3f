"""A test-only callback, added to CLI runs with a config fragment: each rank writes what it saw to a JSON file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from rl_lightning.lineage import weights_digest


class RankRecord(Callback):
    """Writes ``rank{global_rank}.json`` under ``out_dir`` at the end of fit: per-update weight digests and counters.

    Args:
        out_dir: where the per-rank files go.
    """

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)
        self.digests: list[str] = []
        self.first_obs: list[float] | None = None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.digests.append(weights_digest(pl_module))
        if self.first_obs is None:
            self.first_obs = trainer.datamodule.last_rollout.batch["obs"][0].flatten().tolist()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        datamodule = trainer.datamodule
        record = {
            "global_rank": trainer.global_rank,
            "node_rank": trainer.node_rank,
            "world_size": trainer.world_size,
            "num_nodes": trainer.num_nodes,
            "digests": self.digests,
            "first_obs": self.first_obs,
            "updates": pl_module.updates,
            "env_steps": pl_module.env_steps,
            "local_env_steps": datamodule.local_env_steps,
            "rollout_size": datamodule.rollout_size,
        }
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))
