"""Ratio: exact cumulative updates (I16), pretrain, ratio 0, state round trip, realign after resume, bad args."""

from __future__ import annotations

import json
import math
import random
from fractions import Fraction

import pytest

from rl_lightning.data import Ratio
from rl_lightning.errors import ConfigError

RATIOS = [0.5, 1 / 16, 0.03125, 1.0, 1.5, 10.0]


def _steps(seed: int, calls: int = 300, start: int | None = None) -> list[int]:
    """Cumulative policy-step counts growing by irregular increments of 1..37."""
    rng = random.Random(seed)
    step = rng.randint(1, 37) if start is None else start
    out = [step]
    for _ in range(calls - 1):
        step += rng.randint(1, 37)
        out.append(step)
    return out


@pytest.mark.parametrize("ratio", RATIOS)
@pytest.mark.parametrize("pretrain", [0, 7])
def test_cumulative_updates_are_exactly_floor_n_ratio(ratio: float, pretrain: int) -> None:
    sched = Ratio(ratio, pretrain_steps=pretrain)
    total = 0
    for step in _steps(seed=int(ratio * 1000) + pretrain):
        n = sched(step)
        assert n >= 0
        total += n
        assert total == pretrain + math.floor(step * Fraction(ratio))


@pytest.mark.parametrize(("ratio", "steps", "expected"), [(0.1, 10, 1), (0.3, 10, 3), (1 / 3, 3, 1), (1 / 3, 6, 2)])
def test_decimal_ratios_mean_what_they_say(ratio: float, steps: int, expected: int) -> None:
    # Binary floats would give ⌊10 · 0.3⌋ = 2 and ⌊3 · (1/3)⌋ = 0.
    sched = Ratio(ratio)
    assert sum(sched(s) for s in range(1, steps + 1)) == expected


def test_same_step_twice_gives_nothing_more() -> None:
    sched = Ratio(0.5)
    assert sched(10) == 5
    assert sched(10) == 0
    assert sched(11) == 0
    assert sched(12) == 1


def test_pretrain_added_once_even_with_zero_first_amount() -> None:
    sched = Ratio(1 / 16, pretrain_steps=100)
    assert sched(4) == 100  # ⌊4/16⌋ = 0 plus the pretrain
    assert sched(8) == 0
    assert sched(16) == 1
    assert sched.started


def test_ratio_zero_never_trains() -> None:
    sched = Ratio(0.0, pretrain_steps=5)
    assert [sched(s) for s in (1, 100, 10_000)] == [0, 0, 0]


def test_state_dict_round_trip_continues_identically() -> None:
    steps = _steps(seed=3, calls=200)
    reference = Ratio(0.03125, pretrain_steps=3)
    expected = [reference(s) for s in steps]

    first = Ratio(0.03125, pretrain_steps=3)
    got = [first(s) for s in steps[:77]]
    state = json.loads(json.dumps(first.state_dict()))  # plain Python types only
    resumed = Ratio(0.03125, pretrain_steps=3)
    resumed.load_state_dict(state)
    got += [resumed(s) for s in steps[77:]]
    assert got == expected


def test_state_before_first_call_still_pretrains() -> None:
    resumed = Ratio(0.5, pretrain_steps=4)
    resumed.load_state_dict(Ratio(0.5, pretrain_steps=4).state_dict())
    assert resumed(2) == 5


@pytest.mark.parametrize("ratio", RATIOS)
def test_realign_after_resume_gives_no_burst(ratio: float) -> None:
    old = Ratio(ratio, pretrain_steps=10)
    for step in range(0, 1001, 50):
        old(step)
    state = old.state_dict()

    stale = Ratio(ratio, pretrain_steps=10)
    stale.load_state_dict(state)
    assert stale(5000) == math.floor(4000 * Fraction(ratio))  # the burst realign prevents

    resumed = Ratio(ratio, pretrain_steps=10)
    resumed.load_state_dict(state)
    resumed.realign(5000)
    total = resumed(5001)
    assert total == math.floor(Fraction(ratio))  # one policy step's worth, not 4000 steps' worth
    for step in range(5008, 5500, 7):
        total += resumed(step)
        assert total == math.floor((step - 5000) * Fraction(ratio))


def test_realign_on_a_fresh_scheduler_skips_pretraining() -> None:
    sched = Ratio(0.5, pretrain_steps=50)
    sched.realign(300)
    assert sched(304) == 2
    assert sched.state_dict()["prev"] == "304"


def test_resume_with_a_changed_ratio_uses_the_new_one() -> None:
    old = Ratio(0.5)
    old(100)
    new = Ratio(2.0)
    new.load_state_dict(old.state_dict())
    assert new(110) == 20
    assert new.ratio == 2.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ratio": -0.5}, r"data\.replay_ratio=-0\.5"),
        ({"ratio": float("nan")}, r"data\.replay_ratio=nan"),
        ({"ratio": float("inf")}, r"data\.replay_ratio=inf"),
        ({"ratio": True}, r"data\.replay_ratio=True"),
        ({"ratio": "0.5"}, r"data\.replay_ratio='0\.5'"),
        ({"ratio": 0.5, "pretrain_steps": -1}, r"data\.pretrain_steps=-1"),
        ({"ratio": 0.5, "pretrain_steps": 2.5}, r"data\.pretrain_steps=2\.5"),
    ],
)
def test_rejects_bad_config(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Ratio(**kwargs)


def test_rejects_bad_steps() -> None:
    sched = Ratio(0.5)
    with pytest.raises(ValueError, match="policy_steps=-1"):
        sched(-1)
    with pytest.raises(ValueError, match="policy_steps=1.5"):
        sched(1.5)  # type: ignore[arg-type]
    sched(100)
    with pytest.raises(ValueError, match="went backwards: call realign"):
        sched(40)
    sched.realign(40)
    assert sched(42) == 1
