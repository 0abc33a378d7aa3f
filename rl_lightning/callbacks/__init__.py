"""Callbacks that own every cadence of a run."""

from rl_lightning.callbacks.checkpoint import RLCheckpoint
from rl_lightning.callbacks.cuda_stream_weight_sync import CUDAStreamWeightSync
from rl_lightning.callbacks.early_stopping import EarlyStopping
from rl_lightning.callbacks.evaluation import Evaluation
from rl_lightning.callbacks.fail_fast import FailFast
from rl_lightning.callbacks.fault_checkpoint import FaultCheckpoint
from rl_lightning.callbacks.game_evaluation import GameEvaluation
from rl_lightning.callbacks.histograms import Histograms
from rl_lightning.callbacks.progress import EnvStepProgressBar
from rl_lightning.callbacks.soft_target_update import SoftTargetUpdate

__all__ = [
    "CUDAStreamWeightSync",
    "EarlyStopping",
    "EnvStepProgressBar",
    "Evaluation",
    "FailFast",
    "FaultCheckpoint",
    "GameEvaluation",
    "Histograms",
    "RLCheckpoint",
    "SoftTargetUpdate",
]
