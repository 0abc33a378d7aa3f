"""A rating table: Elo ratings fitted to pairwise results by maximum likelihood (Bradley–Terry).

Why a fit rather than Elo's running update or openskill: a panel's round robin is a fixed set of results, not a
stream, and the maximum-likelihood Bradley–Terry strengths are the one answer that does not depend on the order
the games were played in, needs no K-factor or prior width to tune and no extra dependency. The strengths map to
the Elo scale (a 400-point gap is 10:1 odds: ``P(i beats j) = 1 / (1 + 10^((R_j - R_i)/400))``).

A result is counted per pair of seats: in a four-seat Hearts hand the tested seat beats, ties or loses to each of
the three other seats (fewer points is better); a draw counts half a win to each side. ``prior_draws`` virtual
draws per pair that met keep a player who won every comparison at a finite rating (without them its maximum
likelihood strength is infinite); they pull ratings slightly towards each other, less the more games are played.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def fit_elo(
    names: Sequence[str],
    wins: np.ndarray,
    draws: np.ndarray,
    anchor: str | None = None,
    prior_draws: float = 1.0,
    iterations: int = 10_000,
    tolerance: float = 1e-10,
) -> dict[str, float]:
    """Elo ratings of ``names`` from pairwise counts, by Hunter's (2004) MM iterations for Bradley–Terry.

    Args:
        names: the players, in the order of the matrices' rows.
        wins: ``[P, P]``, ``wins[i, j]`` comparisons player i won against player j.
        draws: ``[P, P]``, symmetric, the tied comparisons between i and j.
        anchor: the player rated 0 (e.g. ``random``); ``None``: the ratings average 0.
        prior_draws: virtual draws added to each pair that met (see the module docstring); >= 0.
        iterations: most MM iterations.
        tolerance: stop once no log-strength moves more than this.

    Returns:
        ``{name: rating}``. A player who met nobody gets NaN.
    """
    wins, draws = np.asarray(wins, dtype=np.float64), np.asarray(draws, dtype=np.float64)
    count = len(names)
    if wins.shape != (count, count) or draws.shape != (count, count):
        raise ValueError(f"fit_elo: wins {wins.shape} and draws {draws.shape} must both be [{count}, {count}]")
    if prior_draws < 0:
        raise ValueError(f"fit_elo: prior_draws={prior_draws} must be >= 0")
    if anchor is not None and anchor not in names:
        raise ValueError(f"fit_elo: anchor={anchor!r} is not a player; players: {list(names)}")
    games = wins + wins.T + draws
    met = games > 0
    games = games + prior_draws * met
    score = wins + 0.5 * (draws + prior_draws * met)  # i's points against j: a draw is half a win
    played = met.any(axis=1)
    strength = np.ones(count)
    total = score.sum(axis=1)
    for _ in range(iterations):
        pair = strength[:, None] + strength[None, :]
        denom = (games / pair).sum(axis=1)
        new = np.where(played, total / np.where(denom > 0, denom, 1.0), 1.0)
        new = np.maximum(new, 1e-300)
        new /= math.exp(np.log(new[played]).mean()) if played.any() else 1.0
        moved = np.abs(np.log(new) - np.log(strength)).max()
        strength = new
        if moved < tolerance:
            break
    ratings = 400.0 * np.log10(strength)
    offset = ratings[list(names).index(anchor)] if anchor is not None else ratings[played].mean()
    return {name: float(r - offset) if played[i] else math.nan for i, (name, r) in enumerate(zip(names, ratings))}


def expected_score(rating_i: float, rating_j: float) -> float:
    """Elo's expected score of i against j: ``1 / (1 + 10^((R_j - R_i) / 400))``."""
    return 1.0 / (1.0 + 10.0 ** ((rating_j - rating_i) / 400.0))
