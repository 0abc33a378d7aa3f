"""A match's result as game players read it: the score with its interval, the baseline, and the tests.

Per match (``rl_lightning.games.match.MatchResult``):

* ``<score>``, ``<score>_low``, ``<score>_high``: the tested player's mean score per game with its 95% Student-t
  interval, where ``<score>`` is ``points_per_hand`` for Hearts (points taken, lower is better) and
  ``<name>_per_game`` for other games (their returns). With duplicate deals the sample is the per-deal mean over
  the S seat rotations (the rotations of a deal are not independent; their mean over deals is);
* ``baseline_<score>``: the opponent's own score in the same seats (a game of opponents only; the same deals when
  duplicate);
* ``p_value``: two-sided test of "the tested player scores differently from the opponent in its seat": a paired
  t-test on per-deal differences with duplicate deals (``stats.paired_p_value`` says why that test), else
  Welch's t-test on the games;
* two-seat games also: ``win_rate``, ``draw_rate``, ``loss_rate`` with Wilson intervals (``_low``/``_high``; they
  count games as independent, which duplicate deals of a game with chance make slightly optimistic),
  ``baseline_win_rate``, and ``p_value_win_rate``: the exact binomial (sign) test of wins against losses, draws
  left out, against even chances;
* ``games``: the tested player's games behind the results; ``games_cut``: its games the env cut off before they
  ended (``max_episode_steps``), which have no result and are left out of every number above. With duplicate
  deals a deal counts only when all its games ended (every rotation, and the baseline), so the pairing holds; the
  rates count the tested player's games that ended. Every game cut: the results are NaN;
* per seat r (the order of the game's seats; seat 0 moves first in most games): ``<score>_seat<r>``, the tested
  player's mean score over its games that ended in seat r, and in two-seat games ``win_rate_seat<r>``. The figures
  above average the seats equally (the tested player sits in each seat for the same number of deals).

With ``score_range`` (the game's lowest and highest score, e.g. OpenSpiel's ``min_utility``/``max_utility``), the
score's interval is clipped to it: a Student-t interval can reach past what a game can pay (1.004 in tic-tac-toe).
"""

from __future__ import annotations

import math

import torch

from rl_lightning.games.match import MatchResult
from rl_lightning.games.stats import (
    Interval,
    binomial_p_value,
    mean_interval,
    paired_p_value,
    welch_p_value,
    wilson_interval,
)


def score_key(result: MatchResult) -> str:
    """The metric name of the score: ``points_per_hand`` (Hearts) or ``<score_name>_per_game``."""
    return "points_per_hand" if result.score_name == "points" else f"{result.score_name}_per_game"


def match_metrics(
    result: MatchResult, confidence: float = 0.95, score_range: tuple[float, float] | None = None
) -> dict[str, float]:
    """The metrics of the module docstring, as Python floats (NaN where a quantity cannot be estimated)."""
    tested, base = result.seat_scores("tested").double(), result.seat_scores("baseline").double()
    ended, base_ended = result.ended("tested"), result.ended("baseline")
    has_baseline = result.baseline_played and not bool(torch.isnan(base).all())
    if result.duplicate:  # whole deals: every rotation ended, and the baseline game where there is one
        deals = ended.all(1) & (base_ended.all(1) if has_baseline else True)
        sample, base_sample = tested[deals].mean(1), base[deals].mean(1)
        games = int(deals.sum()) * tested.shape[1]
    else:
        sample, base_sample = tested[ended], base[base_ended]
        games = len(sample)
    interval = mean_interval(sample, confidence) if games else Interval(math.nan, math.nan, math.nan, 0)
    low, high = interval.low, interval.high
    if score_range is not None:  # NaN (too few games) stays NaN: max/min return their first argument then
        low, high = max(low, float(score_range[0])), min(high, float(score_range[1]))
    key = score_key(result)
    out = {key: interval.mean, f"{key}_low": low, f"{key}_high": high, "games": float(games),
           "games_cut": float((~ended).sum())}  # fmt: skip
    out.update({f"{key}_seat{seat}": _mean_ended(tested[:, seat], ended[:, seat]) for seat in range(tested.shape[1])})
    out[f"baseline_{key}"] = float(base_sample.mean()) if has_baseline and len(base_sample) else math.nan
    if not has_baseline or not games:
        out["p_value"] = math.nan
    elif result.duplicate:
        out["p_value"] = paired_p_value(sample, base_sample)
    else:
        out["p_value"] = welch_p_value(sample, base_sample)
    if result.tested.shape[-1] == 2:
        out.update(_two_seat_metrics(result, confidence, has_baseline))
    return out


def _two_seat_metrics(result: MatchResult, confidence: float, has_baseline: bool) -> dict[str, float]:
    """Win/draw/loss rates of the tested seat against the other seat, and the sign test."""
    outcome = result.outcomes("tested").sum(-1)[result.ended("tested")]  # the one other seat's comparison
    games = outcome.numel()
    wins, losses = int((outcome > 0).sum()), int((outcome < 0).sum())
    out: dict[str, float] = {}
    for name, count in (("win_rate", wins), ("draw_rate", games - wins - losses), ("loss_rate", losses)):
        rate = wilson_interval(count, games, confidence)
        out.update({name: rate.mean, f"{name}_low": rate.low, f"{name}_high": rate.high})
    base_wins = (result.outcomes("baseline").sum(-1) > 0)[result.ended("baseline")]
    out["baseline_win_rate"] = float(base_wins.double().mean()) if has_baseline and len(base_wins) else math.nan
    out["p_value_win_rate"] = binomial_p_value(wins, wins + losses)
    per_seat = result.outcomes("tested").sum(-1)  # [D, S]
    seat_ended = result.ended("tested")
    out.update({f"win_rate_seat{seat}": _mean_ended(per_seat[:, seat] > 0, seat_ended[:, seat]) for seat in range(2)})
    return out


def _mean_ended(values: torch.Tensor, ended: torch.Tensor) -> float:
    """Mean of the games that ended (NaN when none did)."""
    kept = values[ended].double()
    return float(kept.mean()) if kept.numel() else math.nan


def pairwise_counts(result: MatchResult) -> tuple[int, int, int]:
    """The tested player's wins, ties and losses against each other seat of its games that ended (for ratings)."""
    outcome = result.outcomes("tested")
    seats = outcome.shape[-1]
    off_diagonal = ~torch.eye(seats, dtype=torch.bool, device=outcome.device)
    ended = result.ended("tested").unsqueeze(-1).expand_as(outcome)
    values = outcome[:, off_diagonal][ended[:, off_diagonal]]
    wins, losses = int((values > 0).sum()), int((values < 0).sum())
    return wins, values.numel() - wins - losses, losses
