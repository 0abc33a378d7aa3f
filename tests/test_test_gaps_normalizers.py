"""Normaliser bugs that passed every earlier test (issue 20's mutation audit), each pinned here.

PPO's reward scaler resets its running return after ``terminated | truncated`` (SB3, as documented), restarts it
for an env whose episode restarted without a done row (a Gymnasium backend after a resume), honours
``norm_clip_obs`` and the normalisers' epsilon.
"""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import PPO, SPO
from rl_lightning.callbacks import RLCheckpoint
from rl_lightning.envs import GymnasiumEnv, Pendulum
from rl_lightning.networks.normalizers import PRIOR_COUNT, ObservationNormalizer, RewardScaler
from tests.helpers import tiny_ppo, trainer


def _naive_returns(reward: np.ndarray, done: np.ndarray, gamma: float, start: np.ndarray, first: np.ndarray):
    """Per env, one step at a time: restart at an episode's first row, ``ret = γ·ret + r``, restart after done.

    Returns every accumulated value ``[T, B]`` and the accumulator left for the next rollout ``[B]``.
    """
    out = np.zeros_like(reward, dtype=np.float64)
    left = np.zeros(reward.shape[1])
    for env in range(reward.shape[1]):
        ret = float(start[env])
        for t in range(reward.shape[0]):
            if first[t, env]:
                ret = 0.0
            ret = gamma * ret + float(reward[t, env])
            out[t, env] = ret
            if done[t, env]:
                ret = 0.0
        left[env] = ret
    return out, left


def _variance_with_prior(data: np.ndarray) -> float:
    n, mean, var = data.size, data.mean(), data.var()
    total = n + PRIOR_COUNT
    return float((PRIOR_COUNT + n * var + mean**2 * PRIOR_COUNT * n / total) / total)


def _rollout(seed: int, steps: int = 12, envs: int = 3, first_row: list[bool] | None = None) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(steps, envs, generator=g) < 0.15
    truncated = (torch.rand(steps, envs, generator=g) < 0.15) & ~terminated
    is_first = torch.zeros(steps, envs, dtype=torch.bool)
    is_first[1:] = terminated[:-1] | truncated[:-1]  # same-step autoreset: the row after a done starts an episode
    if first_row is not None:
        is_first[0] = torch.tensor(first_row)
    return TensorDict(
        {keys.FINAL_OBS: torch.randn(steps, envs, 3, generator=g), keys.REWARD: torch.randn(steps, envs, generator=g),
         keys.VALUE: torch.zeros(steps, envs), keys.TERMINATED: terminated, keys.TRUNCATED: truncated,
         keys.IS_FIRST: is_first},
        [steps, envs],
    )  # fmt: skip


def test_ppo_reward_scaler_restarts_the_return_after_terminations_and_truncations_like_a_naive_loop():
    module, _ = tiny_ppo(Pendulum(), normalize_reward=True, gamma=0.9)
    rollouts = [_rollout(0), _rollout(1)]  # the accumulator carries from the first into the second
    for rollout in rollouts:
        module.process_rollout(rollout.clone())
    reward = torch.cat([r[keys.REWARD] for r in rollouts]).numpy()
    done = torch.cat([r[keys.TERMINATED] | r[keys.TRUNCATED] for r in rollouts]).numpy()
    assert torch.cat([r[keys.TERMINATED] for r in rollouts]).any()  # both kinds of episode end
    assert torch.cat([r[keys.TRUNCATED] for r in rollouts]).any()
    returns, left = _naive_returns(reward, done, 0.9, np.zeros(3), np.zeros_like(done))
    assert float(module.reward_scaler.rms.var) == pytest.approx(_variance_with_prior(returns), rel=1e-9)
    np.testing.assert_allclose(module.reward_scaler.returns.numpy(), left, rtol=1e-12)


def test_ppo_reward_scaler_restarts_the_return_of_an_env_whose_episode_restarted():
    module, _ = tiny_ppo(Pendulum(), normalize_reward=True, gamma=0.9)
    restored = torch.tensor([5.0, 7.0, -3.0], dtype=torch.float64)  # accumulators as a checkpoint restores them
    module.reward_scaler.returns = restored.clone()
    rollout = _rollout(2, first_row=[True, False, True])  # envs 0 and 2 restarted (no done row before them)
    module.process_rollout(rollout.clone())
    done = (rollout[keys.TERMINATED] | rollout[keys.TRUNCATED]).numpy()
    first = rollout[keys.IS_FIRST].numpy()
    returns, left = _naive_returns(rollout[keys.REWARD].numpy(), done, 0.9, restored.numpy(), first)
    assert float(module.reward_scaler.rms.var) == pytest.approx(_variance_with_prior(returns), rel=1e-9)
    np.testing.assert_allclose(module.reward_scaler.returns.numpy(), left, rtol=1e-12)


class _FirstRollout(Callback):
    """The accumulator as restored (at train start) and the first rollout of the run with the accumulator after it."""

    def __init__(self) -> None:
        self.restored: torch.Tensor | None = None
        self.rollout: TensorDict | None = None
        self.after: torch.Tensor | None = None

    def on_train_start(self, trainer, pl_module):
        returns = pl_module.reward_scaler.returns
        self.restored = None if returns is None else returns.clone()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.rollout is None:
            self.rollout = trainer.datamodule.last_rollout.batch.clone()
            self.after = pl_module.reward_scaler.returns.clone()


def _fit_gym(tmp_path, updates: int, ckpt_path: str | None = None) -> _FirstRollout:
    pl.seed_everything(0)
    env = GymnasiumEnv("CartPole-v1")
    module, dm = tiny_ppo(env, num_envs=3, num_steps=16, total_env_steps=48 * updates, normalize_reward=True)
    probe = _FirstRollout()
    checkpoint = RLCheckpoint(every_n_updates=1, dirpath=str(tmp_path / "ckpt"), save_last=True)
    trainer(tmp_path, callbacks=[probe, checkpoint], enable_checkpointing=True).fit(module, dm, ckpt_path=ckpt_path)
    return probe


@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty:UserWarning")
def test_resumed_gymnasium_run_restarts_the_reward_return_with_its_restarted_episodes(tmp_path):
    _fit_gym(tmp_path, 2)
    probe = _fit_gym(tmp_path, 3, ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert probe.restored is not None
    assert bool((probe.restored != 0).any())  # CartPole pays 1 a step: the old episodes' returns were restored
    rollout = probe.rollout
    assert rollout is not None
    assert bool(rollout[keys.IS_FIRST][0].all())  # the Gymnasium envs restarted their episodes on resume
    done = (rollout[keys.TERMINATED] | rollout[keys.TRUNCATED]).numpy()
    first = rollout[keys.IS_FIRST].numpy()
    _, left = _naive_returns(rollout[keys.REWARD].numpy(), done, 0.99, probe.restored.numpy(), first)
    np.testing.assert_allclose(probe.after.numpy(), left, rtol=1e-12)


@pytest.mark.parametrize("algo", [PPO, SPO])
def test_norm_clip_obs_bounds_the_normalised_observations(algo):
    module = algo(env_spec=Pendulum().spec, hidden_sizes=(8,), normalize_obs=True, norm_clip_obs=0.5)
    module.obs_normalizer.update(torch.randn(256, 3))
    normalised = module.obs_normalizer(torch.tensor([[50.0, -50.0, 0.1]]))
    assert normalised[0, :2].tolist() == [0.5, -0.5]  # the default bound (10) would let 10 through
    assert abs(float(normalised[0, 2])) < 0.5


def test_normalisers_add_epsilon_1e8_to_the_variance_inside_the_square_root():
    norm = ObservationNormalizer((1,), clip=None)
    norm.rms.var.fill_(0.0)  # a constant feature: only epsilon keeps the division finite
    assert float(norm(torch.tensor([1e-6]))) == pytest.approx(1e-6 / 1e-4, rel=1e-6)
    scaler = RewardScaler(gamma=0.9, clip=None)
    scaler.rms.var.fill_(0.0)
    assert float(scaler(torch.tensor([1e-6]))) == pytest.approx(1e-6 / 1e-4, rel=1e-6)
