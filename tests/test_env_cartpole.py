"""CartPole matches Gymnasium CartPole-v1 step for step; auto-reset, truncation and purity contracts."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs import BatchedEnv, CartPole


def _gen(seed: int = 0, device: str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _lockstep(dtype: str, num_envs: int, num_steps: int, atol: float) -> int:
    """Step ``num_envs`` Gymnasium envs and one batched CartPole on the same actions; return episodes ended."""
    gyms = [gymnasium.make("CartPole-v1") for _ in range(num_envs)]
    env = CartPole(dtype=dtype)
    torch_dtype = env.dtype
    state = env.reset_state(num_envs, _gen())
    for i, g in enumerate(gyms):
        g.reset(seed=i)
        state["physics"][i] = torch.as_tensor(g.unwrapped.state, dtype=torch_dtype)
    rng, gen, seed, ended = np.random.default_rng(0), _gen(1), num_envs, 0
    for _ in range(num_steps):
        actions = rng.integers(0, 2, num_envs)
        state, out = env.step_state(state, torch.as_tensor(actions), gen)
        for i, g in enumerate(gyms):
            obs, reward, terminated, truncated, _ = g.step(int(actions[i]))
            np.testing.assert_allclose(out[keys.FINAL_OBS][i].numpy(), obs, atol=atol, rtol=0)
            assert out[keys.REWARD][i].item() == reward
            assert out[keys.TERMINATED][i].item() == terminated
            assert out[keys.TRUNCATED][i].item() == truncated
            assert out[keys.IS_FIRST][i].item() == (terminated or truncated)
            if terminated or truncated:
                ended += 1
                assert state["elapsed"][i].item() == 0
                obs, _ = g.reset(seed=seed)
                seed += 1
                state["physics"][i] = torch.as_tensor(g.unwrapped.state, dtype=torch_dtype)
            else:
                assert torch.equal(out[keys.OBS][i], out[keys.FINAL_OBS][i])
            if dtype == "float64":  # the carried state must be Gymnasium's, not only the float32 view of it
                np.testing.assert_allclose(state["physics"][i].numpy(), g.unwrapped.state, atol=1e-12, rtol=0)
    return ended


def test_float64_matches_gymnasium_over_whole_episodes() -> None:
    ended = _lockstep("float64", num_envs=4, num_steps=150, atol=1e-6)
    assert ended >= 10  # random play ends episodes in ~20 steps: terminations were exercised


def test_float32_matches_gymnasium_closely() -> None:
    _lockstep("float32", num_envs=4, num_steps=30, atol=1e-4)


def test_reset_distribution_and_observe() -> None:
    env = CartPole()
    state = env.reset_state(1000, _gen())
    physics = state["physics"]
    assert physics.dtype == torch.float32
    assert state["elapsed"].dtype == torch.int64
    assert physics.abs().max() <= 0.05
    assert physics.abs().max() > 0.049
    assert physics.std(0).min() > 0.02  # uniform on (-0.05, 0.05) has std 0.029
    obs = env.observe(state)[keys.OBS]
    assert obs.dtype == torch.float32
    assert obs.shape == (1000, 4)


def _state(physics: list[list[float]], elapsed: list[int]) -> TensorDict:
    return TensorDict(
        {"physics": torch.tensor(physics, dtype=torch.float64), "elapsed": torch.tensor(elapsed)},
        batch_size=[len(elapsed)],
    )


def test_truncation_at_500_matches_time_limit_and_resets_only_that_row() -> None:
    env = CartPole(dtype="float64")
    start = [[0.01, 0.0, 0.01, 0.0], [0.01, 0.0, 0.01, 0.0], [0.02, -0.01, 0.0, 0.01]]
    state, out = env.step_state(_state(start, [499, 498, 0]), torch.tensor([0, 0, 1]), _gen())
    assert out[keys.TRUNCATED].tolist() == [True, False, False]
    assert out[keys.TERMINATED].tolist() == [False, False, False]
    assert out[keys.IS_FIRST].tolist() == [True, False, False]
    assert state["elapsed"].tolist() == [0, 499, 1]
    assert not torch.equal(out[keys.OBS][0], out[keys.FINAL_OBS][0])
    assert out[keys.OBS][0].abs().max() <= 0.05  # a fresh episode's first observation
    assert torch.equal(out[keys.OBS][1:], out[keys.FINAL_OBS][1:])

    gym = gymnasium.make("CartPole-v1")
    gym.reset(seed=0)
    gym.unwrapped.state = np.array(start[0])
    gym._elapsed_steps = 499  # the TimeLimit wrapper's counter
    obs, _, terminated, truncated, _ = gym.step(0)
    assert (terminated, truncated) == (False, True)
    np.testing.assert_allclose(out[keys.FINAL_OBS][0].numpy(), obs, atol=1e-7, rtol=0)

    # The next step continues the new episode from its first observation.
    _, nxt = env.step_state(state, torch.tensor([1, 1, 1]), _gen())
    assert nxt[keys.IS_FIRST].tolist() == [False, True, False]


def test_terminated_and_truncated_on_the_same_step() -> None:
    env = CartPole(dtype="float64")
    _, out = env.step_state(_state([[2.399, 1.0, 0.0, 0.0]], [499]), torch.tensor([1]), _gen())
    assert out[keys.TERMINATED].item()
    assert out[keys.TRUNCATED].item()
    assert out[keys.REWARD].item() == 1.0
    assert out[keys.FINAL_OBS][0, 0] > 2.4


def test_step_is_functional_and_inplace_agrees() -> None:
    env = CartPole()
    state = env.reset_state(16, _gen())
    state["elapsed"][:4] = 499  # some rows auto-reset, so the generator matters
    before = state.clone()
    action = torch.randint(0, 2, (16,), generator=_gen(3))
    next_a, out_a = env.step_state(state.clone(), action, _gen(7))
    next_b, out_b = env.step_state(state, action, _gen(7))
    assert (state == before).all()
    assert (out_a == out_b).all()
    assert (next_a == next_b).all()
    next_c, out_c = env.step_state(state, action, _gen(7), inplace=True)
    assert (out_c == out_a).all()
    assert (next_c == next_a).all()
    assert out_a[keys.IS_FIRST][:4].all()
    assert not out_a[keys.IS_FIRST][4:].any()


def test_batched_env_runs_and_check_mode_rejects_bad_actions() -> None:
    env = BatchedEnv(CartPole(), num_envs=3, seed=1, check=True)
    assert env.reset()[keys.IS_FIRST].all()
    out = env.step(torch.tensor([0, 1, 0]))
    assert out[keys.REWARD].dtype == torch.float32
    assert out[keys.OBS].shape == (3, 4)
    with pytest.raises(ValueError, match="outside Discrete"):
        env.step(torch.tensor([0, 2, 0]))
    with pytest.raises(ValueError, match="dtype"):
        CartPole(dtype="float16")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu() -> None:
    env = CartPole(dtype="float64")
    state = env.reset_state(64, _gen())
    action = torch.randint(0, 2, (64,), generator=_gen(2))
    _, cpu = env.step_state(state, action, _gen())
    nxt, gpu = env.step_state(state.to("cuda"), action.cuda(), _gen(0, "cuda"))
    assert nxt.device.type == "cuda"
    assert gpu[keys.OBS].device.type == "cuda"
    torch.testing.assert_close(gpu[keys.FINAL_OBS].cpu(), cpu[keys.FINAL_OBS], atol=1e-6, rtol=0)
    assert torch.equal(gpu[keys.TERMINATED].cpu(), cpu[keys.TERMINATED])
