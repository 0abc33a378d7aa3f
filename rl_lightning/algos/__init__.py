"""LightningModules of the algorithms."""

from rl_lightning.algos.base import RLModule
from rl_lightning.algos.bc import BC
from rl_lightning.algos.dreamer import DreamerV3
from rl_lightning.algos.ppo import PPO
from rl_lightning.algos.recurrent_ppo import RecurrentPPO
from rl_lightning.algos.spo import SPO

__all__ = ["BC", "DreamerV3", "PPO", "RecurrentPPO", "RLModule", "SPO"]
