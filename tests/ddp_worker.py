"""Run by tests/test_ddp.py: a 2-process CPU (gloo) PPO, SPO or DreamerV3 fit; each rank writes what it saw."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning.callbacks import Evaluation
from rl_lightning.cli import close_process_group
from rl_lightning.lineage import weights_digest
from rl_lightning.processes.child_processes import pid_alive
from tests.helpers import tiny_dreamer, tiny_ppo, tiny_spo, trainer


class Record(Callback):
    def __init__(self):
        self.rows = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        rollout = trainer.datamodule.last_rollout.batch
        self.rows.append(
            {
                "digest": weights_digest(pl_module),
                "env_steps": pl_module.env_steps,
                "first_obs": rollout["obs"][0].flatten().tolist(),
                "obs_dtype": str(rollout["obs"].dtype),
                "stored_obs_dtype": _stored_obs_dtype(trainer.datamodule),
                "episode_return": float(pl_module.last_metrics.get("rollout/episode_return", float("nan"))),
                "train": {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("train/")},
                "own_train": {k: float(v) for k, v in pl_module.last_metrics.items() if k.startswith("train/")},
            }
        )


class KillRankZeroActor(Callback):
    """After update 1, once rank 0's actor has finished its next rollout, SIGKILL that actor: the rollout it leaves
    is used, and both ranks go on counting the same global env steps."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        actors = trainer.datamodule.actors
        if trainer.global_rank != 0 or pl_module.updates != 1:
            return
        deadline = time.monotonic() + 60
        while not (actors.actors[0].pipe.poll() and int(actors.idle[0]) == 1) and time.monotonic() < deadline:
            time.sleep(0.02)  # until its next rollout is written and announced
        pid = actors.pids[0]
        os.kill(pid, signal.SIGKILL)
        while pid_alive(pid):
            time.sleep(0.02)


def _stored_obs_dtype(datamodule) -> str | None:
    """The replay ring's ``obs`` storage dtype (off-policy data modules only)."""
    replay = getattr(datamodule, "replay", None)
    storage = getattr(replay, "_storage", None)
    return None if storage is None else str(storage["obs"].dtype)


def main(out_dir: str, algo: str) -> None:
    torch.set_num_threads(1)
    pl.seed_everything(0)
    if algo == "dreamer_f64":  # MuJoCo's float64 observations, kept through collection, replay and DDP sampling
        from rl_lightning.envs import GymnasiumEnv

        module, dm = tiny_dreamer(GymnasiumEnv("HalfCheetah-v5"), total_env_steps=48, learning_starts=1)
    elif algo in ("dreamer", "dreamer_compiled"):  # 2 envs × 4 ticks × 2 ranks per update
        module, dm = tiny_dreamer(total_env_steps=48, learning_starts=1, compile_update=algo == "dreamer_compiled")
    elif algo == "spo":
        module, dm = tiny_spo(rollout_length=16, total_env_steps=64 * 2 * 3)
    elif algo == "recurrent_ppo":  # each rank carries its own envs' LSTM states; 3 updates of 64 steps per rank
        from rl_lightning.algos import RecurrentPPO

        _, dm = tiny_ppo(total_env_steps=64 * 2 * 3)
        module = RecurrentPPO(env_spec=dm.env_spec, core_size=8, hidden_sizes=(16,), update_epochs=2, num_minibatches=2)
    elif algo in ("ppo_actors", "ppo_actors_kill"):  # each rank collects in its own actor process (data.num_actors)
        module, dm = tiny_ppo(total_env_steps=64 * 2 * 3)
        dm.num_actors = 1
    else:  # 3 updates of 64 steps on each of 2 ranks; "ppo_norm": the digest covers the normaliser buffers
        norm = {"normalize_obs": True, "normalize_reward": True} if algo == "ppo_norm" else {}
        module, dm = tiny_ppo(total_env_steps=64 * 2 * 3, **norm)
    record = Record()
    # Only the end-of-fit evaluation fires (every_n_updates beyond the run): it logs eval/* at epoch level.
    evaluation = Evaluation(every_n_updates=1_000, num_episodes=2, max_steps=50)
    callbacks = [record, evaluation] + ([KillRankZeroActor()] if algo == "ppo_actors_kill" else [])
    t = trainer(out_dir, callbacks=callbacks, strategy="ddp", devices=2)
    t.fit(module, dm)
    Path(out_dir, f"rank{t.global_rank}.json").write_text(json.dumps({"rows": record.rows, "updates": module.updates}))
    close_process_group()  # what the CLI does after a run: a live gloo group at exit can abort the process


if __name__ == "__main__":
    # Two ranks on two cores, one intra-op thread each: rank 1, which Lightning starts as a fresh interpreter, reads
    # the variable; this process, forked from the CLI fork server with torch imported, sets its own in main().
    os.environ["OMP_NUM_THREADS"] = "1"
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "ppo")
