"""``OpenSpielEnv(reward="trick")``: Hearts' points paid per trick, summing to the engine's returns per hand."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("pyspiel")

from rl_lightning import keys  # noqa: E402
from rl_lightning.envs.base import BatchedEnv  # noqa: E402
from rl_lightning.envs.games import GAME_SCORE, OpenSpielEnv  # noqa: E402
from rl_lightning.errors import ConfigError  # noqa: E402

RANKS, SUITS, SEATS = "23456789TJQKA", "CDHS", "NESW"


def naive_trick(trick: list[list[str]]) -> tuple[int, float]:
    """``(taker, points)`` of a finished trick as the rules read: the highest card of the led suit takes it."""
    led = trick[0][1][1]
    seat, _ = max(((s, c) for s, c in trick if c[1] == led), key=lambda sc: RANKS.index(sc[1][0]))
    points = sum(13.0 if c == "QS" else float(c[1] == "H") for _, c in trick)
    return SEATS.index(seat), points


def random_hands(env: OpenSpielEnv, hands: int, checked_ticks: int, seed: int = 0) -> tuple[int, int]:
    """Play random hands; check every tick's payment against the rules for ``checked_ticks`` ticks and every ended
    hand's sum against ``returns()``. Returns ``(hands ended, moon shots among them)``."""
    batched = BatchedEnv(env, 32, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    out, total = batched.reset(), torch.zeros(32, 4)
    ended = moons = tick = 0
    while ended < hands:
        checked = range(32) if tick < checked_ticks else ()
        before = [json.loads(env.engine_state(batched.state, i).to_json())["tricks"] for i in checked]
        noise = torch.rand(out[keys.ACTION_MASK].shape, generator=gen)
        out = batched.step(noise.masked_fill(~out[keys.ACTION_MASK], -1.0).argmax(-1))
        done = out[keys.TERMINATED]
        total += out[keys.REWARD]
        for row in checked:
            if done[row]:
                continue
            tricks = json.loads(env.engine_state(batched.state, row).to_json())["tricks"]
            want = torch.zeros(4)
            if tricks != before[row] and tricks[-1] and len(tricks[-1]) == 4:  # a trick ended on this tick
                taker, points = naive_trick(tricks[-1])
                want[taker] = -points
            assert torch.equal(out[keys.REWARD][row], want), (row, tricks)
        score = out[GAME_SCORE][done]
        torch.testing.assert_close(total[done], 26.0 - score, rtol=0, atol=0)  # returns() = 26 - points
        moons += int((score == 0).any(-1).logical_and((score == 26).sum(-1) == 3).sum())
        ended += int(done.sum())
        total[done] = 0.0
        tick += 1
    return ended, moons


def test_trick_rewards_are_paid_to_the_taker_and_sum_to_the_engine_returns() -> None:
    ended, moons = random_hands(OpenSpielEnv("open_spiel:hearts", reward="trick"), hands=1200, checked_ticks=200)
    assert ended >= 1200
    assert moons >= 3  # shooting the moon happens in ~1% of random hands: the sum check covers it


def test_trick_rewards_without_passing() -> None:
    random_hands(OpenSpielEnv("open_spiel:hearts", {"pass_cards": False}, reward="trick"), hands=64, checked_ticks=80)


def test_trick_reward_is_refused_for_other_games_and_names() -> None:
    with pytest.raises(ConfigError, match=r"reward='trick' pays Hearts' points per trick and .* 'connect_four'"):
        OpenSpielEnv("open_spiel:connect_four", reward="trick")
    with pytest.raises(ConfigError, match=r"reward='tricks' is not a choice; choose one of \['engine', 'trick'\]"):
        OpenSpielEnv("open_spiel:hearts", reward="tricks")
