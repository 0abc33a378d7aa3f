"""Pendulum matches Gymnasium Pendulum-v1 over a whole episode, including clipping and truncation."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

from rl_lightning import keys
from rl_lightning.envs import BatchedEnv, Pendulum


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _run(dtype: str, num_envs: int, num_steps: int, atol: float) -> None:
    """Step both on the same random torques (a third out of range); a 200th step must truncate."""
    gyms = [gymnasium.make("Pendulum-v1") for _ in range(num_envs)]
    env = Pendulum(dtype=dtype)
    state = env.reset_state(num_envs, _gen())
    for i, g in enumerate(gyms):
        g.reset(seed=i)
        state["physics"][i] = torch.as_tensor(g.unwrapped.state, dtype=env.dtype)
    rng, gen = np.random.default_rng(0), _gen(1)
    for t in range(num_steps):
        actions = rng.uniform(-3.0, 3.0, (num_envs, 1)).astype(np.float32)  # ~1/3 outside [-2, 2]
        state, out = env.step_state(state, torch.as_tensor(actions), gen)
        last = t == 199
        for i, g in enumerate(gyms):
            obs, reward, terminated, truncated, _ = g.step(actions[i])
            np.testing.assert_allclose(out[keys.FINAL_OBS][i].numpy(), obs, atol=atol, rtol=0)
            if dtype == "float64":  # same float64 arithmetic, so the float32 rewards agree exactly
                assert out[keys.REWARD][i].item() == np.float32(reward)
            else:
                np.testing.assert_allclose(out[keys.REWARD][i].item(), reward, atol=atol, rtol=1e-6)
            assert (terminated, truncated) == (False, last)
            assert out[keys.TERMINATED][i].item() is False
            assert out[keys.TRUNCATED][i].item() is last
            assert out[keys.IS_FIRST][i].item() is last
            if dtype == "float64" and not last:  # the carried state is Gymnasium's, not only its float32 view
                np.testing.assert_allclose(state["physics"][i].numpy(), g.unwrapped.state, atol=1e-12, rtol=0)
        if not last:
            assert torch.equal(out[keys.OBS], out[keys.FINAL_OBS])
            assert (state["elapsed"] == t + 1).all()
    if num_steps == 200:
        assert not torch.equal(out[keys.OBS], out[keys.FINAL_OBS])  # auto-reset after truncation
        assert (state["elapsed"] == 0).all()


def test_float64_matches_gymnasium_for_a_whole_episode() -> None:
    _run("float64", num_envs=3, num_steps=200, atol=1e-6)


def test_float32_matches_gymnasium_closely() -> None:
    _run("float32", num_envs=3, num_steps=30, atol=1e-4)


def test_out_of_range_actions_are_clipped_like_gymnasium() -> None:
    env = Pendulum(dtype="float64")
    state = env.reset_state(4, _gen())
    _, big = env.step_state(state, torch.tensor([[5.0], [-7.0], [2.0], [-2.0]]), _gen())
    _, edge = env.step_state(state, torch.tensor([[2.0], [-2.0], [2.0], [-2.0]]), _gen())
    assert (big == edge).all()
    _, inside = env.step_state(state, torch.tensor([[1.0], [-1.0], [1.0], [-1.0]]), _gen())
    assert not torch.equal(inside[keys.FINAL_OBS], edge[keys.FINAL_OBS])

    gym = gymnasium.make("Pendulum-v1")
    gym.reset(seed=0)
    gym.unwrapped.state = state["physics"][0].numpy().copy()
    obs, reward, *_ = gym.step(np.array([5.0], dtype=np.float32))
    np.testing.assert_allclose(big[keys.FINAL_OBS][0].numpy(), obs, atol=1e-6, rtol=0)
    np.testing.assert_allclose(big[keys.REWARD][0].item(), reward, rtol=1e-6)


def test_reset_distribution_spec_and_purity() -> None:
    env = Pendulum()
    assert env.spec.action_low == (-2.0,)
    assert env.spec.action_high == (2.0,)
    assert env.spec.max_episode_steps == 200
    state = env.reset_state(2000, _gen())
    th, thdot = state["physics"].unbind(-1)
    assert th.abs().max() <= np.pi
    assert th.abs().max() > 3.0
    assert thdot.abs().max() <= 1.0
    obs = env.observe(state)[keys.OBS]
    torch.testing.assert_close(obs[:, 0] ** 2 + obs[:, 1] ** 2, torch.ones(2000))
    state["elapsed"][:5] = 199
    before = state.clone()
    action = torch.randn(2000, 1, generator=_gen(2))
    nxt_a, out_a = env.step_state(state, action, _gen(3))
    assert (state == before).all()
    nxt_b, out_b = env.step_state(state, action, _gen(3), inplace=True)
    assert (out_a == out_b).all()
    assert (nxt_a == nxt_b).all()
    assert out_a[keys.TRUNCATED][:5].all()
    assert not out_a[keys.TRUNCATED][5:].any()


def test_check_mode_rejects_wrong_shape_and_nan() -> None:
    env = BatchedEnv(Pendulum(), num_envs=2, check=True)
    env.reset()
    env.step(torch.tensor([[0.5], [9.0]]))  # out of range is legal: the env clips
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match="NaN"):
        env.step(torch.tensor([[0.5], [float("nan")]]))
