"""Tiny Gymnasium envs, one per space kind, named from tests and YAML configs as ``tests.space_envs.<Class>``."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces


class DtypeBox(gymnasium.Env):
    """``Box`` observations of a chosen dtype (values 0..9): action 1 pays 1 when ``obs[0]`` is odd, 0 otherwise.

    Episodes last ``length`` steps (terminated). ``final_obs`` differs from the reset observation, so a store
    that mixes them up is caught.
    """

    def __init__(self, dtype: str = "uint8", length: int = 3) -> None:
        self.observation_space = spaces.Box(0, 9, (3,), np.dtype(dtype))
        self.action_space = spaces.Discrete(2)
        self.length = length
        self._t = 0
        self._obs = np.zeros(3, dtype=dtype)

    def _draw(self) -> np.ndarray:
        self._obs = self.np_random.integers(0, 10, 3).astype(self.observation_space.dtype)
        return self._obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._draw(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(int(action) == int(self._obs[0]) % 2)
        self._t += 1
        return self._draw(), reward, self._t >= self.length, False, {}


class DiscreteChain(gymnasium.Env):
    """``Discrete(n, start=10)`` observations (the cell): action 1 moves right, 0 left; the right end pays 1."""

    def __init__(self, n: int = 4) -> None:
        self.observation_space = spaces.Discrete(n, start=10)
        self.action_space = spaces.Discrete(2)
        self.n = n
        self._pos = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict]:
        super().reset(seed=seed)
        self._pos = int(self.np_random.integers(0, self.n - 1))
        return 10 + self._pos, {}

    def step(self, action: Any) -> tuple[int, float, bool, bool, dict]:
        self._pos = max(0, self._pos + (1 if int(action) == 1 else -1))
        done = self._pos >= self.n - 1
        return 10 + self._pos, float(done), done, False, {}


class TwoKeyDict(gymnasium.Env):
    """A ``Dict`` observation with two vector keys, ``position`` (float32 [2]) and ``velocity`` (float64 [3]).

    Action 1 pays 1 when ``position[0] > 0.5``, action 0 pays 1 otherwise; episodes last ``length`` steps.
    """

    def __init__(self, length: int = 4) -> None:
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(0.0, 1.0, (2,), np.float32),
                "velocity": spaces.Box(-1.0, 1.0, (3,), np.float64),
            }
        )
        self.action_space = spaces.Discrete(2)
        self.length = length
        self._t = 0
        self._obs: dict[str, np.ndarray] = {}

    def _draw(self) -> dict[str, np.ndarray]:
        self._obs = {
            "position": self.np_random.random(2).astype(np.float32),
            "velocity": self.np_random.uniform(-1.0, 1.0, 3),
        }
        return self._obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._draw(), {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        reward = float(int(action) == int(self._obs["position"][0] > 0.5))
        self._t += 1
        return self._draw(), reward, self._t >= self.length, False, {}


class _Bandit(gymnasium.Env):
    """One-step episodes with a constant observation; the reward is the fraction of action entries equal to
    ``target`` (so the optimum, 1.0, is playing ``target``)."""

    target: np.ndarray

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.ones(1, dtype=np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        assert self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype)), action
        reward = float(np.mean(np.asarray(action).reshape(-1) == self.target.reshape(-1)))
        return np.ones(1, dtype=np.float32), reward, True, False, {}


class MultiDiscreteBandit(_Bandit):
    """``MultiDiscrete([3, 4, 5])`` actions; the best action is ``[2, 0, 3]``."""

    def __init__(self) -> None:
        super().__init__()
        self.action_space = spaces.MultiDiscrete([3, 4, 5])
        self.target = np.array([2, 0, 3])


class MultiBinaryBandit(_Bandit):
    """``MultiBinary(4)`` actions; the best action is ``[1, 0, 1, 1]``."""

    def __init__(self) -> None:
        super().__init__()
        self.action_space = spaces.MultiBinary(4)
        self.target = np.array([1, 0, 1, 1])


class TupleObs(gymnasium.Env):
    """A ``Tuple`` observation, which no algorithm here takes (for the refusal test)."""

    def __init__(self) -> None:
        self.observation_space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))
        self.action_space = spaces.Discrete(2)


class Pixels(gymnasium.Env):
    """``uint8`` images, alone (``with_state=False``) or in a ``Dict`` beside a float32 4-vector ``state``.

    The image is ``[3, size, size]`` (``layout="chw"``) or ``[size, size, 3]`` (``"hwc"``), one random grey level
    per frame; action 1 pays 1 when that level is >= 128, action 0 otherwise. Episodes last ``length`` steps.
    """

    def __init__(self, size: int = 36, layout: str = "chw", with_state: bool = True, length: int = 3) -> None:
        shape = (3, size, size) if layout == "chw" else (size, size, 3)
        image = spaces.Box(0, 255, shape, np.uint8)
        state = spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.observation_space = spaces.Dict({"pixels": image, "state": state}) if with_state else image
        self.action_space = spaces.Discrete(2)
        self.shape, self.with_state, self.length = shape, with_state, length
        self._t = 0
        self._level = 0

    def _draw(self) -> Any:
        self._level = int(self.np_random.integers(0, 256))
        image = np.full(self.shape, self._level, dtype=np.uint8)
        if not self.with_state:
            return image
        return {"pixels": image, "state": self.np_random.uniform(-1.0, 1.0, 4).astype(np.float32)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._draw(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        reward = float(int(action) == int(self._level >= 128))
        self._t += 1
        return self._draw(), reward, self._t >= self.length, False, {}
