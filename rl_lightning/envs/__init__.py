"""Batched torch-native envs and the Gymnasium adapter, all behind the functional contract of ``base``."""

from __future__ import annotations

from rl_lightning.envs.base import BatchedEnv, EnvSpec, TorchEnv
from rl_lightning.envs.cartpole import CartPole
from rl_lightning.envs.catch import Catch
from rl_lightning.envs.gymnasium_adapter import GymnasiumEnv
from rl_lightning.envs.pendulum import Pendulum
from rl_lightning.envs.tictactoe import TicTacToe

__all__ = ["BatchedEnv", "CartPole", "Catch", "EnvSpec", "GymnasiumEnv", "Pendulum", "TicTacToe", "TorchEnv"]
