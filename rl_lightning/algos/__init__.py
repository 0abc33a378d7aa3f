"""LightningModules of the algorithms."""

from rl_lightning.algos.base import RLModule
from rl_lightning.algos.ppo import PPO
from rl_lightning.algos.spo import SPO

__all__ = ["PPO", "RLModule", "SPO"]
