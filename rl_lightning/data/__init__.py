"""Collectors, rollouts and IterableDataModules."""

from rl_lightning.data.collector import Collector
from rl_lightning.data.on_policy import OnPolicyDataModule, Rollout
from rl_lightning.data.replay import ReplayRing
from rl_lightning.data.replay_datamodule import ReplayDataModule, ReplayUpdate

__all__ = ["Collector", "OnPolicyDataModule", "ReplayDataModule", "ReplayRing", "ReplayUpdate", "Rollout"]
