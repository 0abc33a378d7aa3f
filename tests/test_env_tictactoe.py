"""TicTacToe: masks, crafted outcomes, a legal and uniform random opponent, check mode, determinism."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs import BatchedEnv, TicTacToe

E = 0  # empty cell in the crafted boards below (1 = agent X, 2 = opponent O)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _boards(*rows: list[int]) -> TensorDict:
    return TensorDict({"board": torch.tensor(rows, dtype=torch.int64)}, batch_size=[len(rows)])


def _decode(obs: torch.Tensor) -> torch.Tensor:
    """One-hot (empty, agent, opponent) planes back to a 0/1/2 board."""
    return obs.view(-1, 9, 3).argmax(-1)


def test_reset_observation_and_mask() -> None:
    env = TicTacToe()
    view = env.observe(env.reset_state(3, _gen()))
    assert view[keys.ACTION_MASK].dtype == torch.bool
    assert view[keys.ACTION_MASK].all()
    assert view[keys.OBS].shape == (3, 27)
    assert view[keys.OBS].dtype == torch.float32
    assert torch.equal(view[keys.OBS].view(3, 9, 3)[..., 0], torch.ones(3, 9))

    view = env.observe(_boards([1, 2, E, E, 1, E, E, E, 2]))
    assert view[keys.ACTION_MASK][0].tolist() == [False, False, True, True, False, True, True, True, False]
    assert _decode(view[keys.OBS])[0].tolist() == [1, 2, 0, 0, 1, 0, 0, 0, 2]
    assert view[keys.OBS].sum().item() == 9  # exactly one plane set per cell


def test_crafted_outcomes() -> None:
    env = TicTacToe()
    state = _boards(
        [1, 1, E, 2, 2, E, E, E, E],  # X plays 2: wins the top row
        [1, 2, 1, 2, 2, E, 1, E, E],  # X plays 8: both O replies (5 or 7) complete an O line
        [1, 2, 1, 1, 2, 2, 2, 1, E],  # X plays 8: fills the board, no line
        [E, E, E, E, E, E, E, E, E],  # X plays 4: game goes on
    )
    nxt, out = env.step_state(state, torch.tensor([2, 8, 8, 4]), _gen())
    assert out[keys.REWARD].tolist() == [1.0, -1.0, 0.0, 0.0]
    assert out[keys.TERMINATED].tolist() == [True, True, True, False]
    assert not out[keys.TRUNCATED].any()
    assert out[keys.IS_FIRST].tolist() == [True, True, True, False]
    final = _decode(out[keys.FINAL_OBS])
    assert final[0].tolist() == [1, 1, 1, 2, 2, 0, 0, 0, 0]  # no opponent move after the win
    assert final[2].tolist() == [1, 2, 1, 1, 2, 2, 2, 1, 1]
    assert (final[1] == 0).sum() == 1
    assert final[1, 8] == 1
    assert final[3, 4] == 1
    assert (final[3] == 2).sum() == 1
    # Finished games restart on an empty board; the ongoing one carries on.
    assert (nxt["board"][:3] == 0).all()
    assert torch.equal(nxt["board"][3], final[3])
    assert out[keys.ACTION_MASK][:3].all()
    assert torch.equal(out[keys.ACTION_MASK][3], final[3] == 0)
    assert torch.equal(out[keys.OBS][3], out[keys.FINAL_OBS][3])


def test_illegal_moves_lose_without_check_mode() -> None:
    env = TicTacToe()
    state = _boards([1, 2, E, E, E, E, E, E, E], [1, 2, E, E, E, E, E, E, E], [E] * 9)
    _, out = env.step_state(state, torch.tensor([1, 9, -1]), _gen())
    assert out[keys.REWARD].tolist() == [-1.0, -1.0, -1.0]
    assert out[keys.TERMINATED].all()
    assert _decode(out[keys.FINAL_OBS])[0].tolist() == [1, 2, 0, 0, 0, 0, 0, 0, 0]  # board untouched


def test_random_opponent_only_plays_empty_cells() -> None:
    env, gen, num = TicTacToe(), _gen(1), 256
    state = env.reset_state(num, gen)
    games = 0
    for _step in range(60):
        before = state["board"].clone()
        mask = env.observe(state)[keys.ACTION_MASK]
        action = torch.multinomial(mask.float(), 1, generator=gen).squeeze(-1)
        state, out = env.step_state(state, action, gen)
        after = _decode(out[keys.FINAL_OBS])
        changed = after != before
        assert torch.equal(before[changed], torch.zeros_like(before[changed]))  # only empty cells change
        assert (after.gather(-1, action[:, None]) == 1).all()
        new_o = ((after == 2) & changed).sum(-1)
        assert (new_o <= 1).all()
        assert (new_o[~out[keys.TERMINATED]] == 1).all()
        assert (out[keys.REWARD][~out[keys.TERMINATED]] == 0).all()
        games += int(out[keys.TERMINATED].sum())
    assert games > 1000


def test_opponent_reply_is_uniform() -> None:
    env, num = TicTacToe(), 8000
    _, out = env.step_state(env.reset_state(num, _gen()), torch.full((num,), 4), _gen(5))
    replies = (_decode(out[keys.FINAL_OBS]) == 2).float().sum(0)
    assert replies[4] == 0
    assert replies.sum() == num
    others = torch.cat([replies[:4], replies[5:]])
    assert (others - num / 8).abs().max() < 0.12 * num / 8  # ~4 sigma for 1000 expected per cell


def test_check_mode_raises_on_masked_and_out_of_range_actions() -> None:
    env = BatchedEnv(TicTacToe(), num_envs=2, seed=0, check=True)
    env.reset()
    out = env.step(torch.tensor([4, 0]))
    taken = (~out[keys.ACTION_MASK][0]).nonzero()[0]  # a cell occupied in env 0
    with pytest.raises(ValueError, match="masked"):
        env.step(torch.tensor([int(taken), 1 if bool(out[keys.ACTION_MASK][1, 1]) else 2]))
    with pytest.raises(ValueError, match="outside Discrete"):
        env.step(torch.tensor([9, 1]))


def test_same_seed_same_games() -> None:
    def play(seed: int) -> list[torch.Tensor]:
        env = BatchedEnv(TicTacToe(), num_envs=32, seed=seed)
        mask = env.reset()[keys.ACTION_MASK]
        pick, outs = _gen(9), []
        for _step in range(20):
            out = env.step(torch.multinomial(mask.float(), 1, generator=pick).squeeze(-1))
            mask = out[keys.ACTION_MASK]
            outs.append(torch.cat([out[keys.FINAL_OBS], out[keys.REWARD][:, None]], -1))
        return outs

    first, again, other = play(3), play(3), play(4)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))
