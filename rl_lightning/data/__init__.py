"""Collectors, rollouts and IterableDataModules."""

from rl_lightning.data.collector import Collector
from rl_lightning.data.on_policy import OnPolicyDataModule, Rollout

__all__ = ["Collector", "OnPolicyDataModule", "Rollout"]
