"""Pure losses and estimators."""

from rl_lightning.objectives.dreamer import (
    ReturnNormalizer,
    TwoHot,
    continue_target,
    imagination_weights,
    kl_losses,
    lambda_return,
    reinforce_loss,
    twohot_bins,
    value_loss,
)
from rl_lightning.objectives.gae import generalized_advantage_estimate
from rl_lightning.objectives.ppo import explained_variance, ppo_loss
from rl_lightning.objectives.spo import (
    DUAL_FLOOR,
    clamp_duals_,
    critic_loss,
    critic_targets,
    dual_value,
    kl_trust_region,
    particle_cross_entropy,
    spo_continuous_policy_loss,
    spo_discrete_policy_loss,
    temperature_loss,
)

__all__ = [
    "DUAL_FLOOR",
    "ReturnNormalizer",
    "TwoHot",
    "clamp_duals_",
    "continue_target",
    "critic_loss",
    "critic_targets",
    "dual_value",
    "explained_variance",
    "generalized_advantage_estimate",
    "imagination_weights",
    "kl_losses",
    "kl_trust_region",
    "lambda_return",
    "particle_cross_entropy",
    "ppo_loss",
    "reinforce_loss",
    "spo_continuous_policy_loss",
    "spo_discrete_policy_loss",
    "temperature_loss",
    "twohot_bins",
    "value_loss",
]
