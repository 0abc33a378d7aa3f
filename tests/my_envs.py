"""A user's own Gymnasium envs, as a user would ship them: importing this module registers ``MyEnv-v0``.

Named from a YAML config as ``tests.my_envs:MyEnv-v0`` (Gymnasium's "import this module, then make this id").
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces


class Corridor(gymnasium.Env):
    """Walk a corridor of ``length`` cells: action 1 steps right, 0 left; the far end pays 1 and terminates.

    The start cell is drawn from ``np_random``, so differently seeded envs start differently. Each step
    costs ``step_cost``. Observation: ``[position / length, 1]`` as float32.

    Args:
        length: number of cells; the episode terminates on reaching cell ``length``.
        step_cost: reward paid on every step that does not reach the end.
    """

    def __init__(self, length: int = 6, step_cost: float = 0.01) -> None:
        self.length = length
        self.step_cost = step_cost
        self.observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._pos = 0

    def _obs(self) -> np.ndarray:
        return np.array([self._pos / self.length, 1.0], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._pos = int(self.np_random.integers(0, self.length // 2 + 1))
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._pos = max(0, self._pos + (1 if int(action) == 1 else -1))
        terminated = self._pos >= self.length
        return self._obs(), 1.0 if terminated else -self.step_cost, terminated, False, {}


class GoalCorridor(Corridor):
    """``Corridor`` with a ``Dict`` observation: ``position``, ``goal`` and a ``noise`` key to filter out."""

    def __init__(self, length: int = 6, step_cost: float = 0.01) -> None:
        super().__init__(length, step_cost)
        box = spaces.Box(0.0, 1.0, (1,), np.float32)
        self.observation_space = spaces.Dict({"position": box, "goal": box, "noise": box})

    def _obs(self) -> dict[str, np.ndarray]:
        position = np.array([self._pos / self.length], dtype=np.float32)
        noise = self.np_random.random(1).astype(np.float32)
        return {"position": position, "goal": np.ones(1, dtype=np.float32), "noise": noise}


class ScaleObservation(gymnasium.ObservationWrapper):
    """A user's own wrapper: multiplies Box observations by ``scale``."""

    def __init__(self, env: gymnasium.Env, scale: float) -> None:
        super().__init__(env)
        self.scale = scale
        box = env.observation_space
        self.observation_space = spaces.Box(box.low * scale, box.high * scale, box.shape, box.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return (observation * self.scale).astype(self.observation_space.dtype)


def register_plugin_envs() -> None:
    """What an installed package's ``gymnasium.envs`` entry point calls: registers ``PluginCorridor-v0``."""
    gymnasium.register("PluginCorridor-v0", entry_point="tests.my_envs:Corridor", max_episode_steps=12)


gymnasium.register("MyEnv-v0", entry_point="tests.my_envs:Corridor", max_episode_steps=20)
