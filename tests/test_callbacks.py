"""Evaluation, FailFast (with bundle replay), RLCheckpoint and EarlyStopping inside real fits."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from rl_lightning import keys
from rl_lightning.callbacks import EarlyStopping, Evaluation, FailFast, RLCheckpoint
from rl_lightning.callbacks.fail_fast import reproduce
from rl_lightning.envs import CartPole
from rl_lightning.errors import ConfigError
from tests.helpers import tiny_ppo, trainer


class NaNRewardCartPole(CartPole):
    """CartPole whose rewards turn NaN from the 40th step of a run on: poisons the second update."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def step_state(self, state, action, generator, inplace=False):
        state, out = super().step_state(state, action, generator, inplace)
        self.calls += 1
        if self.calls > 40:
            out[keys.REWARD] = out[keys.REWARD] * float("nan")
        return state, out


def test_evaluation_cadence_and_random_baseline(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_ppo(total_env_steps=64 * 4)
    evaluation = Evaluation(every_n_updates=2, num_episodes=3)
    trainer(tmp_path, callbacks=[evaluation]).fit(module, dm)
    assert [h["updates"] for h in evaluation.history] == [2, 4]
    for record in evaluation.history:
        assert 8 <= record["eval/episode_return"] <= 500  # CartPole returns are episode lengths
        assert record["eval/episode_return"] == record["eval/episode_length"]
        assert record["eval/random_episode_return"] == evaluation.random_return
    assert 8 <= evaluation.random_return < 60  # uniform-random CartPole lasts ~22 steps
    by_env_steps = Evaluation(every_n_env_steps=100, num_episodes=2)
    module, dm = tiny_ppo(total_env_steps=64 * 4)
    trainer(tmp_path, callbacks=[by_env_steps]).fit(module, dm)
    assert [h["env_steps"] for h in by_env_steps.history] == [128, 256]


@pytest.mark.parametrize("kwargs", [{}, {"every_n_updates": 1, "every_n_env_steps": 5}, {"every_n_updates": 0}])
def test_evaluation_rejects_bad_cadence(kwargs):
    with pytest.raises(ConfigError, match="every_n"):
        Evaluation(**kwargs)


def test_fail_fast_raises_with_a_bundle_that_reproduces(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_ppo(env=NaNRewardCartPole(), total_env_steps=64 * 5)
    dm.check_finite = False  # let the NaN reward reach the loss: FailFast is under test here, not the env check
    with pytest.raises(FloatingPointError, match="non-finite") as info:
        trainer(tmp_path, callbacks=[FailFast(bundle_dir=str(tmp_path))]).fit(module, dm)
    assert module.updates == 3  # rollout 3 is the first with NaN rewards
    bundle = tmp_path / "failfast_bundle_rank0.pt"
    assert str(bundle) in str(info.value)
    assert "train/loss" in reproduce(bundle)


def test_checkpoint_cadence_and_early_stopping(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_ppo(total_env_steps=64 * 20)
    checkpoint = RLCheckpoint(
        every_n_updates=2,
        dirpath=str(tmp_path / "ckpt"),
        save_last=True,
        monitor="eval/episode_return",
        mode="max",
        save_top_k=1,
    )
    stop = EarlyStopping(monitor="eval/episode_return", mode="max", stopping_threshold=0.0)
    evaluation = Evaluation(every_n_updates=3, num_episodes=2)
    trainer(tmp_path, callbacks=[evaluation, stop, checkpoint], enable_checkpointing=True).fit(module, dm)
    assert module.updates == 3  # stopped by the first evaluation (any return ≥ 0)
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert saved["rl_counters"]["updates"] == 3
    assert saved["policy_revision"]["family"] == "ppo"
    assert saved["policy_revision"]["version"] == 3
    assert len(list((tmp_path / "ckpt").glob("*.ckpt"))) == 2  # last + best
