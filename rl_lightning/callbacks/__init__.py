"""Callbacks that own every cadence of a run.

``SoftTargetUpdate`` and ``CUDAStreamWeightSync`` are part of the algorithms that attach them for their own updates
(``rl_lightning.algos``, below this package); they are re-exported here, where configs name them.
"""

from __future__ import annotations

from rl_lightning.algos.cuda_stream_weight_sync import CUDAStreamWeightSync
from rl_lightning.algos.soft_target_update import SoftTargetUpdate
from rl_lightning.callbacks.checkpoint import RLCheckpoint
from rl_lightning.callbacks.early_stopping import EarlyStopping
from rl_lightning.callbacks.eval_requests import EvalRequests
from rl_lightning.callbacks.evaluation import Evaluation
from rl_lightning.callbacks.fail_fast import FailFast
from rl_lightning.callbacks.fault_checkpoint import FaultCheckpoint
from rl_lightning.callbacks.game_evaluation import GameEvaluation
from rl_lightning.callbacks.histograms import Histograms
from rl_lightning.callbacks.progress import EnvStepProgressBar

__all__ = [
    "CUDAStreamWeightSync",
    "EarlyStopping",
    "EnvStepProgressBar",
    "EvalRequests",
    "Evaluation",
    "FailFast",
    "FaultCheckpoint",
    "GameEvaluation",
    "Histograms",
    "RLCheckpoint",
    "SoftTargetUpdate",
]
