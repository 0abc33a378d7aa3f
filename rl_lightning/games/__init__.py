"""Judging a game agent as players do (docs/guides/games.md): matches against a panel with seats rotated and duplicate
deals (``match``), intervals and tests (``stats``, ``summary``), and a rating table (``rating``)."""

from __future__ import annotations

from rl_lightning.games.match import MatchResult, PolicyBot, play_games, play_match
from rl_lightning.games.rating import fit_elo
from rl_lightning.games.summary import match_metrics, pairwise_counts

__all__ = ["MatchResult", "PolicyBot", "fit_elo", "match_metrics", "pairwise_counts", "play_games", "play_match"]
