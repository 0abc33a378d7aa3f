"""Batched torch-native envs and the Gymnasium backends (``envs.gymnasium``), all behind the contract of ``base``."""

from __future__ import annotations

from rl_lightning.envs.base import BatchedEnv, EnvSpec, ObsLeaf, TorchEnv
from rl_lightning.envs.cartpole import CartPole
from rl_lightning.envs.catch import Catch
from rl_lightning.envs.gymnasium import (
    AleVectorEnv,
    ClassSpec,
    EnvPoolEnv,
    GymnasiumEnv,
    GymnasiumVectorEnv,
    make_eval_env,
)
from rl_lightning.envs.noise_step import NoiseSteppedEnv
from rl_lightning.envs.pendulum import Pendulum
from rl_lightning.envs.tictactoe import TicTacToe

__all__ = [
    "AleVectorEnv",
    "BatchedEnv",
    "CartPole",
    "Catch",
    "ClassSpec",
    "EnvPoolEnv",
    "EnvSpec",
    "ObsLeaf",
    "GymnasiumEnv",
    "GymnasiumVectorEnv",
    "NoiseSteppedEnv",
    "Pendulum",
    "TicTacToe",
    "TorchEnv",
    "make_eval_env",
]
