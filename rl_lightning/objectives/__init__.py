"""Pure losses and estimators."""

from rl_lightning.objectives.gae import generalized_advantage_estimate
from rl_lightning.objectives.ppo import explained_variance, ppo_loss

__all__ = ["explained_variance", "generalized_advantage_estimate", "ppo_loss"]
