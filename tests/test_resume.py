"""fit → stop → resume continues env steps, updates, policy version, RNG, env state and callback state exactly."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning.algos import PPO
from rl_lightning.callbacks import Evaluation, RLCheckpoint
from rl_lightning.errors import ConfigError
from rl_lightning.lineage import check_family
from tests.helpers import tiny_ppo, trainer


class _Losses(Callback):
    def __init__(self):
        self.rows = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        m = pl_module.last_metrics
        self.rows.append((pl_module.updates, float(m["train/loss"]), float(m["train/approx_kl"])))


def _fit(tmp_path, budget_updates, ckpt_path=None, dirpath=None):
    pl.seed_everything(7)
    module, dm = tiny_ppo(total_env_steps=64 * budget_updates, num_minibatches=4)
    losses = _Losses()
    evaluation = Evaluation(every_n_updates=2, num_episodes=2)
    checkpoint = RLCheckpoint(every_n_updates=1, dirpath=str(dirpath or tmp_path / "ckpt"), save_last=True)
    trainer(tmp_path, callbacks=[losses, evaluation, checkpoint], enable_checkpointing=True).fit(
        module, dm, ckpt_path=ckpt_path
    )
    return module, dm, losses.rows, evaluation


def test_resume_continues_exactly_where_it_stopped(tmp_path):
    straight, straight_dm, straight_rows, straight_eval = _fit(tmp_path / "a", 6)
    first, _, first_rows, _ = _fit(tmp_path / "b", 3)
    last = tmp_path / "b" / "ckpt" / "last.ckpt"
    with pytest.warns(UserWarning, match="exists and is not empty"):  # resumes into its own checkpoint dir
        resumed, resumed_dm, resumed_rows, evaluation = _fit(tmp_path / "b", 6, ckpt_path=str(last))
    assert first.updates == 3
    assert resumed.updates == 6
    assert resumed.policy_version == 6
    assert resumed.parent_version == 3
    assert resumed_dm.env_steps == straight_dm.env_steps == 6 * 64
    assert first_rows + resumed_rows == straight_rows  # same losses: RNG, env state and optimiser restored
    # The random baseline measured before the checkpoint is restored with it: one value for the whole run.
    assert evaluation.random_return == straight_eval.random_return
    assert 8.0 <= evaluation.random_return <= 100.0  # a random CartPole policy lasts ~10-50 steps
    assert [h["eval/episode_return"] for h in evaluation.history] == [
        h["eval/episode_return"] for h in straight_eval.history[-len(evaluation.history) :]
    ]
    assert evaluation.last_updates == 6
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def test_checkpoint_of_another_family_is_refused(tmp_path):
    _fit(tmp_path, 1)
    checkpoint = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    checkpoint["policy_revision"]["family"] = "spo"
    torch.save(checkpoint, tmp_path / "spo.ckpt")
    with pytest.raises(ConfigError, match="family 'spo'.*model is 'ppo'"):
        check_family(checkpoint, "ppo")
    module, dm = tiny_ppo()
    with pytest.raises(ConfigError, match="family 'spo'"):
        trainer(tmp_path).fit(module, dm, ckpt_path=str(tmp_path / "spo.ckpt"))


def test_load_from_checkpoint_rebuilds_the_module(tmp_path):
    module, _, _, _ = _fit(tmp_path, 2)
    loaded = PPO.load_from_checkpoint(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert loaded.env_spec == module.env_spec
    assert loaded.updates == 2
    for a, b in zip(loaded.parameters(), module.parameters()):
        assert torch.equal(a, b)
