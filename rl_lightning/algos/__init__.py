"""LightningModules of the algorithms."""

from __future__ import annotations

from rl_lightning.algos.alphazero import AlphaZero
from rl_lightning.algos.base import RLModule
from rl_lightning.algos.bc import BC
from rl_lightning.algos.dreamer import DreamerV3
from rl_lightning.algos.ppo import PPO
from rl_lightning.algos.recurrent_ppo import RecurrentPPO
from rl_lightning.algos.spo import SPO

#: Checkpoint family (``PolicyRevision.family``) → the module class that loads it (``load_policy``, game panels).
FAMILIES: dict[str, type[RLModule]] = {cls.family: cls for cls in (PPO, SPO, DreamerV3, RecurrentPPO, BC, AlphaZero)}

__all__ = ["AlphaZero", "BC", "FAMILIES", "DreamerV3", "PPO", "RecurrentPPO", "RLModule", "SPO"]
