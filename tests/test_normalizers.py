"""Observation and reward normalisers against naive references, Gymnasium's own wrappers, and 2 gloo ranks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers.utils import RunningMeanStd as GymRunningMeanStd
from gymnasium.wrappers.vector import NormalizeReward
from tensordict import TensorDict

from rl_lightning.networks.normalizers import (
    PRIOR_COUNT,
    DictObservationNormalizer,
    ObservationNormalizer,
    RewardScaler,
    RunningMeanStd,
)

ROOT = Path(__file__).resolve().parents[1]


def _with_prior(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of ``data`` pooled with the prior (mean 0, var 1, count ``PRIOR_COUNT``), in closed form."""
    n, mean, var = data.shape[0], data.mean(0), data.var(0)
    total = n + PRIOR_COUNT
    return n * mean / total, (PRIOR_COUNT + n * var + mean**2 * PRIOR_COUNT * n / total) / total


def _random_splits(n: int, rng: np.random.Generator) -> list[int]:
    cuts = np.sort(rng.choice(np.arange(1, n), size=rng.integers(1, 6), replace=False))
    return np.diff(np.concatenate([[0], cuts, [n]])).tolist()


@pytest.mark.parametrize("seed", range(4))
def test_running_stats_equal_the_stats_of_all_data_for_any_batch_split(seed):
    rng = np.random.default_rng(seed)
    data = rng.normal(loc=[3.0, -50.0, 0.0], scale=[0.5, 20.0, 1e-3], size=(200, 3))
    rms = RunningMeanStd((3,))
    for chunk in np.split(data, np.cumsum(_random_splits(len(data), rng))[:-1]):
        rms.update(torch.from_numpy(chunk).float().reshape(-1, 1, 3))  # extra leading dims reduce too
    as_float32 = data.astype(np.float32).astype(np.float64)
    mean, var = _with_prior(as_float32)
    np.testing.assert_allclose(rms.mean.numpy(), mean, rtol=1e-9)
    np.testing.assert_allclose(rms.var.numpy(), var, rtol=1e-9)
    assert float(rms.count) == pytest.approx(len(data) + PRIOR_COUNT)
    # numpy's plain mean/var over everything seen, up to the prior's weight PRIOR_COUNT / N.
    prior_weight = PRIOR_COUNT * (1 + as_float32.mean(0) ** 2 + as_float32.var(0)) / len(data)
    np.testing.assert_allclose(rms.mean.numpy(), as_float32.mean(0), rtol=1e-5)
    assert np.all(np.abs(rms.var.numpy() - as_float32.var(0)) <= prior_weight)


def test_running_stats_match_gymnasium_running_mean_std_batch_by_batch():
    rng = np.random.default_rng(0)
    ours, theirs = RunningMeanStd((2,)), GymRunningMeanStd(shape=(2,))
    for size in (1, 7, 64, 3):
        batch = rng.normal(2.0, 3.0, size=(size, 2))
        ours.update(torch.from_numpy(batch))
        theirs.update(batch)
        np.testing.assert_allclose(ours.mean.numpy(), theirs.mean, rtol=1e-12)
        np.testing.assert_allclose(ours.var.numpy(), theirs.var, rtol=1e-12)
        assert float(ours.count) == pytest.approx(theirs.count)


def test_empty_batch_leaves_the_stats_unchanged():
    rms = RunningMeanStd((2,))
    rms.update(torch.randn(5, 2))
    before = {k: v.clone() for k, v in rms.state_dict().items()}
    rms.update(torch.zeros(0, 2))
    for key, value in rms.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_observation_normalizer_normalises_and_clips_like_vecnormalize():
    norm = ObservationNormalizer((2,), clip=5.0)
    data = torch.tensor([[0.0, 100.0], [2.0, 300.0], [4.0, 200.0]])
    norm.update(data)
    mean, var = (t.numpy() for t in (norm.rms.mean, norm.rms.var))
    obs = torch.tensor([[1.0, 200.0], [50.0, -1e4]])
    expected = np.clip((obs.numpy() - mean) / np.sqrt(var + 1e-8), -5.0, 5.0)
    out = norm(obs)
    assert out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)
    assert out[1].tolist() == [5.0, -5.0]  # clipped
    assert norm(torch.tensor([1, 200], dtype=torch.int64)).dtype == torch.float32  # integer obs are cast


def test_forward_never_updates_and_eval_mode_freezes_update():
    norm, scaler = ObservationNormalizer((3,)), RewardScaler(gamma=0.9)
    norm(torch.randn(10, 3) * 5 + 2)
    scaler(torch.randn(4, 2))
    assert float(norm.rms.count) == PRIOR_COUNT
    assert float(scaler.rms.count) == PRIOR_COUNT
    norm.eval()
    scaler.eval()
    norm.update(torch.randn(10, 3))
    scaler.update(torch.randn(4, 2), torch.zeros(4, 2, dtype=torch.bool))
    assert float(norm.rms.count) == PRIOR_COUNT
    assert float(scaler.rms.count) == PRIOR_COUNT
    assert scaler.returns is None  # nor did the return accumulator move
    norm.train()
    norm.update(torch.randn(10, 3))
    assert float(norm.rms.count) == pytest.approx(10 + PRIOR_COUNT)


def test_images_pass_through_untouched():
    pixels = torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8)
    norm = ObservationNormalizer((3, 8, 8), torch.uint8)
    norm.update(pixels)
    assert torch.equal(norm(pixels), pixels)
    assert norm(pixels).dtype == torch.uint8
    assert list(norm.state_dict()) == []  # nothing to checkpoint
    # A uint8 *vector* (e.g. a discrete feature vector) is not an image: it is normalised.
    vector = ObservationNormalizer((4,), torch.uint8)
    vector.update(torch.randint(0, 256, (16, 4), dtype=torch.uint8))
    assert float(vector.rms.count) == pytest.approx(16 + PRIOR_COUNT)


def test_dict_observations_get_one_normalizer_per_vector_key():
    specs = {"position": ((2,), torch.float32), ("robot", "joints"): ((3,), torch.float64),
             "camera": ((3, 4, 4), torch.uint8)}  # fmt: skip
    norm = DictObservationNormalizer(specs)
    obs = TensorDict(
        {"position": torch.randn(6, 2) * 3 + 1, "robot": {"joints": torch.randn(6, 3, dtype=torch.float64) - 4},
         "camera": torch.randint(0, 256, (6, 3, 4, 4), dtype=torch.uint8)}, batch_size=[6],
    )  # fmt: skip
    norm.update(obs)
    out = norm(obs)
    for key, shape in (("position", (2,)), (("robot", "joints"), (3,))):
        alone = ObservationNormalizer(shape)
        alone.update(obs.get(key))
        assert torch.equal(out.get(key), alone(obs.get(key)))
    assert torch.equal(out["camera"], obs["camera"])
    assert obs["robot", "joints"].dtype == torch.float64  # the input is not modified in place
    assert set(norm.state_dict()) == {
        f"normalizers.{name}.rms.{stat}" for name in ("position", "robot/joints") for stat in ("mean", "var", "count")
    }


def _naive_discounted_returns(reward: np.ndarray, done: np.ndarray, gamma: float) -> np.ndarray:
    """Per env, one step at a time: ``ret = γ·ret + r``, recorded, then zeroed after a terminal/truncated step."""
    out = np.zeros_like(reward, dtype=np.float64)
    for env in range(reward.shape[1]):
        ret = 0.0
        for t in range(reward.shape[0]):
            ret = gamma * ret + float(reward[t, env])
            out[t, env] = ret
            if done[t, env]:
                ret = 0.0
    return out


def _reward_table(seed: int, steps: int = 40, envs: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    reward = torch.randn(steps, envs, generator=g) * 2 - 1
    terminated = torch.rand(steps, envs, generator=g) < 0.08
    truncated = torch.rand(steps, envs, generator=g) < 0.05
    return reward, terminated, truncated


@pytest.mark.parametrize("split", [[40], [13, 27], [1, 1, 38], [10, 10, 10, 10]])
def test_reward_scaler_matches_a_naive_per_env_loop(split):
    reward, terminated, truncated = _reward_table(0)
    done = terminated | truncated
    scaler = RewardScaler(gamma=0.95, clip=None)
    start = 0
    for length in split:  # the accumulator carries over from one rollout to the next
        scaler.update(reward[start : start + length], done[start : start + length])
        start += length
    returns = _naive_discounted_returns(reward.numpy(), done.numpy(), 0.95)
    _, var = _with_prior(returns.reshape(-1))
    np.testing.assert_allclose(float(scaler.rms.var), var, rtol=1e-9)
    expected = reward.numpy() / np.sqrt(var + 1e-8)
    np.testing.assert_allclose(scaler(reward).numpy(), expected, rtol=1e-5)
    last = np.where(done[-1].numpy(), 0.0, returns[-1])
    np.testing.assert_allclose(scaler.returns.numpy(), last, rtol=1e-6)


def test_reward_scaler_clips():
    scaler = RewardScaler(gamma=0.0, clip=2.0)
    scaler.update(torch.tensor([[1.0], [-1.0]]), torch.zeros(2, 1, dtype=torch.bool))  # var ≈ 1
    assert scaler(torch.tensor([0.5, 30.0, -30.0])).tolist() == pytest.approx([0.5, 2.0, -2.0], rel=1e-4)


class _ScriptedEnv(gym.Env):
    """Plays back one column of a reward/termination table; the row pointer survives resets."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        self.table, self.t = (reward, terminated, truncated), 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        reward, terminated, truncated = (column[self.t] for column in self.table)
        self.t += 1
        return np.zeros(1, np.float32), float(reward), bool(terminated), bool(truncated), {}


def test_reward_scaler_agrees_with_gymnasium_vector_normalize_reward_same_step():
    """Gymnasium's vector ``NormalizeReward`` under same-step autoreset accumulates, updates and resets the
    return as SB3 and we do, with two differences: it updates its variance every step (its scaled rewards use the
    variance up to that step; ours the variance after the whole rollout), and on a *terminating* step it drops
    the history (``acc·γ·(1 − terminated) + r``), where SB3 and we record ``acc·γ + r`` and reset afterwards.
    Over truncations only, the statistics and the last step's scaled reward agree."""
    reward, _, truncated = (t.numpy() for t in _reward_table(1, steps=30, envs=2))
    terminated = np.zeros_like(truncated)
    envs = gym.vector.SyncVectorEnv(
        [lambda i=i: _ScriptedEnv(reward[:, i], terminated[:, i], truncated[:, i]) for i in range(2)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    wrapped = NormalizeReward(envs, gamma=0.9)
    wrapped.reset(seed=0)
    scaled = [wrapped.step(np.zeros(2, dtype=np.int64))[1] for _ in range(30)]
    scaler = RewardScaler(gamma=0.9, clip=None)
    scaler.update(torch.from_numpy(reward), torch.from_numpy(terminated | truncated))
    assert float(scaler.rms.var) == pytest.approx(wrapped.return_rms.var, rel=1e-5)  # theirs accumulate in float32
    assert float(scaler.rms.mean) == pytest.approx(wrapped.return_rms.mean, rel=1e-5)
    np.testing.assert_allclose(scaler(torch.from_numpy(reward[-1])).numpy(), scaled[-1], rtol=1e-5)


def test_state_dict_round_trip_carries_the_statistics():
    norm, scaler = ObservationNormalizer((2,)), RewardScaler(gamma=0.9)
    norm.update(torch.randn(32, 2) * 4 + 1)
    scaler.update(torch.randn(8, 4), torch.zeros(8, 4, dtype=torch.bool))
    fresh_norm, fresh_scaler = ObservationNormalizer((2,)), RewardScaler(gamma=0.9)
    fresh_norm.load_state_dict(norm.state_dict())
    fresh_scaler.load_state_dict(scaler.state_dict())
    obs, reward = torch.randn(5, 2), torch.randn(5)
    assert torch.equal(fresh_norm(obs), norm(obs))
    assert torch.equal(fresh_scaler(reward), scaler(reward))
    assert set(norm.state_dict()) == {"rms.mean", "rms.var", "rms.count"}
    assert set(scaler.state_dict()) == {"rms.mean", "rms.var", "rms.count"}  # the accumulator is not a buffer
    fresh_scaler.load_returns_per_rank(scaler.returns_per_rank())
    assert torch.equal(fresh_scaler.returns, scaler.returns)


def test_two_gloo_ranks_with_different_data_hold_identical_pooled_stats(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.normalizer_ddp_worker", str(tmp_path), str(rank)],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for rank in range(2)
    ]
    for worker in workers:
        _, stderr = worker.communicate(timeout=120)
        assert worker.returncode == 0, stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]
    for key, value in ranks[0]["obs"].items():
        assert torch.equal(value, ranks[1]["obs"][key]), key  # bit-identical on both ranks
    for key, value in ranks[0]["reward"].items():
        assert torch.equal(value, ranks[1]["reward"][key]), key
    pooled = torch.cat([r["obs_data"] for r in ranks]).double().numpy()
    mean, var = _with_prior(pooled)
    np.testing.assert_allclose(ranks[0]["obs"]["rms.mean"].numpy(), mean, rtol=1e-9)
    np.testing.assert_allclose(ranks[0]["obs"]["rms.var"].numpy(), var, rtol=1e-9)
    returns = [_naive_discounted_returns(r["reward_data"].numpy(), r["done_data"].numpy(), 0.9) for r in ranks]
    _, return_var = _with_prior(np.concatenate([r.reshape(-1) for r in returns]))
    np.testing.assert_allclose(float(ranks[0]["reward"]["rms.var"]), return_var, rtol=1e-9)
    assert not torch.equal(ranks[0]["returns"], ranks[1]["returns"])  # each rank keeps its own accumulator
