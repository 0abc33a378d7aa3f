"""AlphaZero: self-play trained toward a tree search over the engine's game states (PUCT or Gumbel)."""

from __future__ import annotations

from rl_lightning.algos.alphazero.gumbel import GumbelSearch
from rl_lightning.algos.alphazero.module import SEARCH_POLICY, AlphaZero
from rl_lightning.algos.alphazero.puct import PUCTSearch, check_searchable
from rl_lightning.algos.alphazero.tree import root_values, visit_targets

__all__ = [
    "SEARCH_POLICY",
    "AlphaZero",
    "GumbelSearch",
    "PUCTSearch",
    "check_searchable",
    "root_values",
    "visit_targets",
]
