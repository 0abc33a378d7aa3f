"""Run by tests/test_selfplay_ddp.py: a 2-process CPU (gloo) self-play PPO fit with a league; each rank writes what
it saw."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning import keys
from rl_lightning.cli import close_process_group
from rl_lightning.data.selfplay import PLAYER
from rl_lightning.lineage import weights_digest
from tests.helpers import trainer
from tests.test_selfplay import tiny_selfplay


class Record(Callback):
    def __init__(self):
        self.rows = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        rollout = trainer.datamodule.last_rollout.batch
        league = trainer.datamodule.selfplay.league
        self.rows.append({
            "digest": weights_digest(pl_module),
            "env_steps": pl_module.env_steps,
            "ticks_obs": rollout[keys.OBS][3:].flatten().tolist(),
            "players": rollout[PLAYER][3:].flatten().tolist(),
            "league_versions": sorted(league.versions),
            "league_digest": [weights_digest(slot) for slot in league.slots],
            "league_stream": hashlib.sha256(league.generator.get_state().numpy().tobytes()).hexdigest(),
        })  # fmt: skip


def main(out_dir: str) -> None:
    torch.set_num_threads(1)
    pl.seed_everything(0)
    league = {"size": 2, "snapshot_every_n_updates": 1, "share": 0.5}
    module, dm = tiny_selfplay(num_steps=10, total_env_steps=4 * 10 * 2 * 3, seats={2: "random"}, league=league)
    record = Record()
    t = trainer(out_dir, callbacks=[record], strategy="ddp", devices=2)
    t.fit(module, dm)
    Path(out_dir, f"rank{t.global_rank}.json").write_text(json.dumps({"rows": record.rows, "updates": module.updates}))
    close_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
