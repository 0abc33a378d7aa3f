"""The panel's numbers say which seat they came from, and keep within what the game can score."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.games.match import MatchResult, play_match
from rl_lightning.games.summary import match_metrics
from tests.game_match_toys import HighCard, MaxBot, MinBot


def _two_seat_result(first: list[float], second: list[float]) -> MatchResult:
    """Deals where the tested player scores ``first[d]`` in seat 0 and ``second[d]`` in seat 1 (zero-sum)."""
    tested = torch.zeros(len(first), 2, 2)
    tested[:, 0, 0], tested[:, 0, 1] = torch.tensor(first), -torch.tensor(first)
    tested[:, 1, 1], tested[:, 1, 0] = torch.tensor(second), -torch.tensor(second)
    return MatchResult(tested, torch.zeros_like(tested), True, False, "return")


def test_the_intervals_stay_within_the_games_score_range() -> None:
    """Tic-tac-toe pays -1, 0 or 1: a t interval of mostly wins reached 1.004 (``rl-lightning test``)."""
    result = _two_seat_result([1.0] * 9 + [0.0], [1.0] * 10)
    unclipped = match_metrics(result)
    assert unclipped["return_per_game_high"] > 1.0
    clipped = match_metrics(result, score_range=(-1.0, 1.0))
    assert clipped["return_per_game_high"] == 1.0
    assert clipped["return_per_game_low"] == unclipped["return_per_game_low"]
    assert clipped["return_per_game"] == unclipped["return_per_game"]


def test_each_seat_has_its_own_score_and_win_rate() -> None:
    metrics = match_metrics(_two_seat_result([1.0, 1.0, 1.0, 0.0], [-1.0, 0.0, 1.0, -1.0]))
    assert metrics["return_per_game_seat0"] == 0.75
    assert metrics["return_per_game_seat1"] == -0.25
    assert metrics["win_rate_seat0"] == 0.75
    assert metrics["win_rate_seat1"] == 0.25
    assert metrics["return_per_game"] == pytest.approx(0.25)  # both seats, equally


def test_a_four_seat_match_breaks_its_score_down_by_seat() -> None:
    """HighCard pays seat 0 a bonus of 5: the seat breakdown shows it; the headline averages it away."""
    metrics = match_metrics(play_match(HighCard(), MaxBot(), MinBot(), num_deals=20, seed=1))
    seats = [metrics[f"return_per_game_seat{seat}"] for seat in range(4)]
    assert seats[0] > max(seats[1:]) + 3.0
    assert metrics["return_per_game"] == pytest.approx(sum(seats) / 4)
