"""Batched torch-native envs, the Gymnasium backends (``envs.gymnasium``) and multi-seat games (``envs.games``)."""

from __future__ import annotations

from rl_lightning.envs.base import BatchedEnv, EnvSpec, ObsLeaf, TorchEnv
from rl_lightning.envs.cartpole import CartPole
from rl_lightning.envs.catch import Catch
from rl_lightning.envs.games import OpenSpielEnv, PettingZooEnv
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
    "OpenSpielEnv",
    "Pendulum",
    "PettingZooEnv",
    "TicTacToe",
    "TorchEnv",
    "make_eval_env",
]
