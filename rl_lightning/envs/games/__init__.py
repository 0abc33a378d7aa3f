"""Multi-seat turn-based games (docs/guides/games.md): OpenSpiel and PettingZoo engines, and bundled bots (``bots``)."""

from __future__ import annotations

from rl_lightning.envs.games.base import GAME_SCORE, TurnBasedGameEnv
from rl_lightning.envs.games.open_spiel import OpenSpielEnv
from rl_lightning.envs.games.pettingzoo import PettingZooEnv

__all__ = ["GAME_SCORE", "OpenSpielEnv", "PettingZooEnv", "TurnBasedGameEnv"]
