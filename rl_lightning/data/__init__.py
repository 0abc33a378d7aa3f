"""Collectors, rollouts and IterableDataModules."""

from rl_lightning.data.bc_datamodule import BCDataModule
from rl_lightning.data.collector import Collector
from rl_lightning.data.dataloaders import Rollout
from rl_lightning.data.dreamer_datamodule import DreamerDataModule, DreamerUpdate
from rl_lightning.data.fused_collector import FusedCollector
from rl_lightning.data.on_policy import OnPolicyDataModule
from rl_lightning.data.ratio import Ratio
from rl_lightning.data.replay import ReplayRing, check_sequence_replay
from rl_lightning.data.replay_datamodule import ReplayDataModule, ReplayUpdate

__all__ = [
    "BCDataModule",
    "Collector",
    "DreamerDataModule",
    "DreamerUpdate",
    "FusedCollector",
    "OnPolicyDataModule",
    "Ratio",
    "ReplayDataModule",
    "ReplayRing",
    "ReplayUpdate",
    "Rollout",
    "check_sequence_replay",
]
