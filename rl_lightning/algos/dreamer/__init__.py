"""DreamerV3: world model, imagination actor-critic and the player."""

from rl_lightning.algos.dreamer.module import DreamerV3

__all__ = ["DreamerV3"]
