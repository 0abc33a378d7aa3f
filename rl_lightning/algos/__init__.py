"""LightningModules of the algorithms."""

from rl_lightning.algos.base import RLModule
from rl_lightning.algos.ppo import PPO

__all__ = ["PPO", "RLModule"]
