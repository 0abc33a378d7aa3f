"""A crash in the end-of-fit evaluation: ``FaultCheckpoint`` saves the last completed update, whose weights it has."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from rl_lightning.callbacks import Evaluation, FaultCheckpoint
from tests.helpers import tiny_ppo, trainer
from tests.test_evaluation_baseline import RaisingCartPole


def test_a_crash_in_the_end_of_fit_evaluation_saves_the_last_update(tmp_path):
    pl.seed_everything(0)
    module, datamodule = tiny_ppo(total_env_steps=64 * 3)
    evaluation = Evaluation(every_n_updates=100, num_episodes=2, env=RaisingCartPole())  # evaluates at the end only
    with pytest.raises(RuntimeError, match="simulator crashed") as info:
        trainer(tmp_path, callbacks=[evaluation, FaultCheckpoint()]).fit(module, datamodule)
    assert module.updates == 3
    assert any("checkpoint of update 3 saved to" in note for note in info.value.__notes__)
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert saved["rl_counters"]["updates"] == 3
    assert saved["OnPolicyDataModule"]["local_env_steps"] == 3 * 64
    for name, value in module.state_dict().items():
        assert torch.equal(saved["state_dict"][name], value), name  # the weights after the third update
