"""Actor processes that collect beside the learner (docs/guides/speed.md): shared weights, shared rollout slots."""

from rl_lightning.data.actors.policy_factory import PolicyFactory
from rl_lightning.data.actors.pool import ActorPool, ActorRollout, PoolSettings
from rl_lightning.data.actors.weights import SharedWeights

__all__ = ["ActorPool", "ActorRollout", "PolicyFactory", "PoolSettings", "SharedWeights"]
