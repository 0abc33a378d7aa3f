"""Catch matches a naive pure-Python reference frame for frame; rendering, auto-reset, purity and optimum."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs import BatchedEnv, Catch
from rl_lightning.errors import ConfigError


def _gen(seed: int = 0, device: str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


class _RefCatch:
    """bsuite's Catch rules, one env, plain Python: the ground truth for the batched env."""

    def __init__(self, rows: int, columns: int, ball_col: int) -> None:
        self.rows, self.columns = rows, columns
        self.ball_row, self.ball_col, self.paddle = 0, ball_col, columns // 2

    def step(self, action: int) -> tuple[float, bool]:
        self.paddle = min(max(self.paddle + action - 1, 0), self.columns - 1)
        self.ball_row += 1
        if self.ball_row == self.rows - 1:
            return (1.0 if self.paddle == self.ball_col else -1.0), True
        return 0.0, False

    def frame(self, size: int) -> torch.Tensor:
        height, width = size // self.rows, size // self.columns
        lit = {(self.ball_row, self.ball_col), (self.rows - 1, self.paddle)}
        pixels = [[255 if (y // height, x // width) in lit else 0 for x in range(size)] for y in range(size)]
        return torch.tensor([pixels], dtype=torch.uint8)


def _cells(obs: torch.Tensor, env: Catch) -> torch.Tensor:
    """Bool ``[B, rows, columns]`` grid read back from frames, after checking each cell is a uniform block."""
    height, width = env.size // env.rows, env.size // env.columns
    blocks = obs[:, 0].reshape(obs.shape[0], env.rows, height, env.columns, width)
    assert (blocks == blocks[:, :, :1, :, :1]).all()
    return blocks[:, :, 0, :, 0] == 255


@pytest.mark.parametrize("size", [8, 16, 32, 64])
def test_render_one_ball_block_and_one_paddle_block(size: int) -> None:
    env = Catch(size=size)
    assert env.spec.obs_shape == (1, size, size)
    assert env.spec.obs_dtype == torch.uint8
    assert env.spec.num_actions == 3
    state = env.reset_state(64, _gen())
    obs = env.observe(state)[keys.OBS]
    assert obs.dtype == torch.uint8
    assert obs.shape == (64, 1, size, size)
    assert set(obs.unique().tolist()) == {0, 255}
    scale = size // 8
    assert ((obs == 255).sum((1, 2, 3)) == 2 * scale * scale).all()
    cells = _cells(obs, env)
    assert cells[:, 0].sum(-1).eq(1).all()  # the ball, in the top row
    assert torch.equal(cells[:, 0].float().argmax(-1), state["ball_col"])
    assert torch.equal(cells[:, -1].float().argmax(-1), torch.full((64,), 4))  # the paddle, centred
    assert not cells[:, 1:-1].any()
    assert len(set(state["ball_col"].tolist())) == 8  # every start column occurs


def _state(ball_row: list[int], ball_col: list[int], paddle_col: list[int]) -> TensorDict:
    values = {"ball_row": ball_row, "ball_col": ball_col, "paddle_col": paddle_col, "elapsed": ball_row}
    return TensorDict({k: torch.tensor(v) for k, v in values.items()}, batch_size=[len(ball_row)])


def test_ball_falls_one_row_and_paddle_moves_and_clamps() -> None:
    env = Catch()
    state = _state([0, 0, 0, 0], [3, 3, 3, 3], [0, 7, 4, 4])
    state, out = env.step_state(state, torch.tensor([0, 2, 0, 2]), _gen())
    assert state["paddle_col"].tolist() == [0, 7, 3, 5]  # clamped at both walls, moved otherwise
    assert state["ball_row"].tolist() == [1, 1, 1, 1]
    assert state["ball_col"].tolist() == [3, 3, 3, 3]
    cells = _cells(out[keys.OBS], env)
    assert cells[:, 1, 3].all()
    assert cells.sum((1, 2)).eq(2).all()
    state, _ = env.step_state(state, torch.tensor([1, 1, 1, 1]), _gen())
    assert state["paddle_col"].tolist() == [0, 7, 3, 5]
    assert state["ball_row"].tolist() == [2, 2, 2, 2]
    assert out[keys.REWARD].eq(0).all()
    assert not (out[keys.TERMINATED] | out[keys.TRUNCATED] | out[keys.IS_FIRST]).any()


@pytest.mark.parametrize(("rows", "columns", "size"), [(8, 8, 16), (4, 8, 16), (8, 4, 32)])
def test_matches_reference_in_lockstep(rows: int, columns: int, size: int) -> None:
    num_envs = 12
    env = Catch(rows=rows, columns=columns, size=size)
    state = env.reset_state(num_envs, _gen())
    refs = [_RefCatch(rows, columns, int(c)) for c in state["ball_col"]]
    obs = env.observe(state)[keys.OBS]
    for i, ref in enumerate(refs):
        assert torch.equal(obs[i], ref.frame(size))
    actions_gen, gen, ended = _gen(1), _gen(2), 0
    for _ in range(10 * (rows - 1)):
        actions = torch.randint(0, 3, (num_envs,), generator=actions_gen)
        state, out = env.step_state(state, actions, gen)
        for i, ref in enumerate(refs):
            reward, terminated = ref.step(int(actions[i]))
            assert torch.equal(out[keys.FINAL_OBS][i], ref.frame(size))
            assert out[keys.REWARD][i].item() == reward
            assert out[keys.TERMINATED][i].item() == terminated
            assert not out[keys.TRUNCATED][i].item()
            assert out[keys.IS_FIRST][i].item() == terminated
            if terminated:
                ended += 1
                refs[i] = _RefCatch(rows, columns, int(state["ball_col"][i]))
            assert torch.equal(out[keys.OBS][i], refs[i].frame(size))
    assert ended == 10 * num_envs  # every episode lasts exactly rows - 1 steps


def test_same_step_auto_reset() -> None:
    env = Catch()
    state = env.reset_state(32, _gen())
    gen = _gen(1)
    for _ in range(6):
        state, out = env.step_state(state, torch.ones(32, dtype=torch.int64), gen)
        assert not out[keys.IS_FIRST].any()
    last_ball_col = state["ball_col"].clone()
    state, out = env.step_state(state, torch.ones(32, dtype=torch.int64), gen)
    assert out[keys.TERMINATED].all()
    assert out[keys.IS_FIRST].all()
    assert not out[keys.TRUNCATED].any()
    assert torch.equal(out[keys.REWARD], torch.where(last_ball_col == 4, 1.0, -1.0))
    final = _cells(out[keys.FINAL_OBS], env)
    rows = torch.arange(32)
    assert final[rows, -1, last_ball_col].all()  # the ball lies in the bottom row
    assert final[:, -1, 4].all()  # the paddle never moved
    assert torch.equal(final[:, -1].sum(-1), 1 + (last_ball_col != 4).long())  # one block on a catch
    assert not final[:, :-1].any()
    assert torch.equal(out[keys.OBS], env.observe(state)[keys.OBS])  # the new episode's first frame
    assert state["ball_row"].eq(0).all()
    assert state["elapsed"].eq(0).all()
    assert state["paddle_col"].eq(4).all()


def test_truncation_before_the_ball_lands() -> None:
    env = Catch(max_episode_steps=3)
    assert env.spec.max_episode_steps == 3
    state = env.reset_state(4, _gen())
    for step in range(1, 4):
        state, out = env.step_state(state, torch.zeros(4, dtype=torch.int64), _gen(step))
    assert out[keys.TRUNCATED].all()
    assert not out[keys.TERMINATED].any()
    assert out[keys.IS_FIRST].all()
    assert out[keys.REWARD].eq(0).all()
    assert _cells(out[keys.FINAL_OBS], env)[:, 3].any(-1).all()  # cut with the ball mid-air
    assert state["ball_row"].eq(0).all()


def test_step_is_functional_and_inplace_agrees() -> None:
    env = Catch()
    state = env.reset_state(16, _gen())
    state["ball_row"][:4] = 6  # these rows land and auto-reset, so the generator matters
    before = state.clone()
    action = torch.randint(0, 3, (16,), generator=_gen(3))
    next_a, out_a = env.step_state(state.clone(), action, _gen(7))
    next_b, out_b = env.step_state(state, action, _gen(7))
    assert (state == before).all()
    assert (out_a == out_b).all()
    assert (next_a == next_b).all()
    next_c, out_c = env.step_state(state, action, _gen(7), inplace=True)
    assert next_c is state
    assert (out_c == out_a).all()
    assert (next_c == next_a).all()
    assert out_a[keys.IS_FIRST][:4].all()
    assert not out_a[keys.IS_FIRST][4:].any()


def _rollout(seed: int, num_steps: int = 20) -> list[TensorDict]:
    env = Catch()
    state = env.reset_state(8, _gen(seed))
    gen, actions_gen, outs = _gen(seed + 1), _gen(seed + 2), []
    for _ in range(num_steps):
        state, out = env.step_state(state, torch.randint(0, 3, (8,), generator=actions_gen), gen)
        outs.append(out)
    return outs


def test_same_seed_same_episodes() -> None:
    first, second, other = _rollout(0), _rollout(0), _rollout(5)
    assert all((a == b).all() for a, b in zip(first, second))
    assert not all(torch.equal(a[keys.OBS], b[keys.OBS]) for a, b in zip(first, other))


def _play(env: Catch, policy: str, num_envs: int = 64, episodes: int = 4) -> torch.Tensor:
    """Rewards of ``episodes`` full episodes per env under a scripted policy that reads only the pixels."""
    state = env.reset_state(num_envs, _gen())
    obs, gen, rewards = env.observe(state)[keys.OBS], _gen(1), []
    for _ in range(episodes * (env.rows - 1)):
        if policy == "optimal":
            cells = _cells(obs, env)
            ball = cells[:, :-1].any(1).float().argmax(-1)
            paddle = cells[:, -1].float().argmax(-1)
            action = (ball - paddle).sign() + 1
        else:
            action = torch.randint(0, 3, (num_envs,), generator=gen)
        state, out = env.step_state(state, action, gen)
        obs = out[keys.OBS]
        rewards.append(out[keys.REWARD][out[keys.TERMINATED]])
    return torch.cat(rewards)


def test_optimal_policy_always_catches_and_random_policy_does_not() -> None:
    env = Catch()
    optimal = _play(env, "optimal")
    assert optimal.numel() == 4 * 64
    assert optimal.eq(1).all()
    random = _play(env, "random")
    assert random.numel() == 4 * 64
    assert random.mean() < -0.4  # a random walk ends under the ball about one time in eight (mean ≈ -0.75)


def test_batched_env_runs_and_check_mode_rejects_bad_actions() -> None:
    env = BatchedEnv(Catch(), num_envs=4, seed=1, check=True)
    first = env.reset()
    assert first[keys.IS_FIRST].all()
    assert first[keys.OBS].shape == (4, 1, 16, 16)
    out = env.step(torch.tensor([0, 1, 2, 1]))
    assert out[keys.REWARD].dtype == torch.float32
    assert out[keys.OBS].dtype == torch.uint8
    for key in (keys.TERMINATED, keys.TRUNCATED, keys.IS_FIRST):
        assert out[key].dtype == torch.bool
        assert out[key].shape == (4,)
    with pytest.raises(ValueError, match="outside Discrete"):
        env.step(torch.tensor([0, 3, 0, 0]))
    with pytest.raises(ValueError, match="outside Discrete"):
        env.step(torch.tensor([0, -1, 0, 0]))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"size": 12}, r"size=12 .*\[8, 16, 32, 64, 128, 256\]"),
        ({"size": 4}, "size=4"),
        ({"size": 512}, "size=512"),
        ({"rows": 16, "size": 8}, r"size=8 .*\[16, 32, 64, 128, 256\]"),
        ({"rows": 1}, "rows=1"),
        ({"columns": 0}, "columns=0"),
        ({"max_episode_steps": -1}, "max_episode_steps=-1"),
    ],
)
def test_bad_config_raises_config_error(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Catch(**kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu() -> None:
    env = Catch(size=64)
    state = env.reset_state(64, _gen())
    state["ball_row"][:8] = 6
    action = torch.randint(0, 3, (64,), generator=_gen(2))
    nxt_cpu, cpu = env.step_state(state, action, _gen())
    nxt, gpu = env.step_state(state.to("cuda"), action.cuda(), _gen(0, "cuda"))
    assert nxt.device.type == "cuda"
    assert gpu[keys.OBS].device.type == "cuda"
    assert torch.equal(gpu[keys.FINAL_OBS].cpu(), cpu[keys.FINAL_OBS])
    assert torch.equal(gpu[keys.REWARD].cpu(), cpu[keys.REWARD])
    assert torch.equal(gpu[keys.IS_FIRST].cpu(), cpu[keys.IS_FIRST])
    assert torch.equal(nxt["paddle_col"].cpu(), nxt_cpu["paddle_col"])
    fresh = env.reset_state(256, _gen(0, "cuda"))
    assert fresh["ball_col"].device.type == "cuda"
    assert env.observe(fresh)[keys.OBS].shape == (256, 1, 64, 64)
