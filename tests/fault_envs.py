"""Envs that fail on purpose (raise, or return NaN) and a marker callback, for the fault-tolerance tests.

Importing this module registers the Gymnasium id ``RLTest/Counting-v0``; CLI runs name ``FaultyGym`` by class path.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium
import lightning.pytorch as pl
import numpy as np
import torch
from gymnasium import spaces
from lightning.pytorch.callbacks import Callback
from tensordict import TensorDict

from rl_lightning.envs import CartPole, GymnasiumEnv

COUNTING_ID = "RLTest/Counting-v0"

#: How many instances reached each (kind, step) so far in this process: picks the n-th env to fail.
_REACHED: Counter[tuple[str, int]] = Counter()


class CountingEnv(gymnasium.Env):
    """A 20-step episodic env whose n-th instance to reach its ``fail_step``-th step raises (or returns NaN).

    Instances step in env-index order inside the adapter, so ``fail_nth=3`` makes env index 2 fail.

    Args:
        fail_step: total steps (over episodes) of an instance at which it raises ``RuntimeError``; -1 never.
        fail_nth: which instance (1-based, in the order they reach ``fail_step``) raises.
        nan_step: as ``fail_step``, but the step returns a NaN ``nan_key`` instead of raising.
        nan_nth: as ``fail_nth`` for ``nan_step``.
        nan_key: ``"reward"`` or ``"obs"``.
    """

    def __init__(
        self, fail_step: int = -1, fail_nth: int = 1, nan_step: int = -1, nan_nth: int = 1, nan_key: str = "reward"
    ) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.fail_step, self.fail_nth = fail_step, fail_nth
        self.nan_step, self.nan_nth, self.nan_key = nan_step, nan_nth, nan_key
        self.total = 0
        self.t = 0

    def _obs(self, action: int = 0) -> np.ndarray:
        return np.array([self.t / 20.0, float(action)], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.total += 1
        self.t += 1
        if self.total == self.fail_step and self._nth("fail") == self.fail_nth:
            raise RuntimeError(f"simulator crashed at step {self.total}")
        obs, reward = self._obs(int(action)), float(action)
        if self.total == self.nan_step and self._nth("nan") == self.nan_nth:
            if self.nan_key == "obs":
                obs[0] = np.nan
            else:
                reward = float("nan")
        return obs, reward, self.t >= 20, False, {}

    def _nth(self, kind: str) -> int:
        _REACHED[(kind, self.total)] += 1
        return _REACHED[(kind, self.total)]


if COUNTING_ID not in gymnasium.envs.registry:
    gymnasium.register(id=COUNTING_ID, entry_point=CountingEnv, max_episode_steps=100)


class FaultyGym(GymnasiumEnv):
    """``CountingEnv`` through the project's Gymnasium adapter, with its failure knobs as constructor arguments."""

    def __init__(
        self, fail_step: int = -1, fail_nth: int = 1, nan_step: int = -1, nan_nth: int = 1, nan_key: str = "reward"
    ) -> None:
        kwargs = {"fail_step": fail_step, "fail_nth": fail_nth, "nan_step": nan_step, "nan_nth": nan_nth}
        super().__init__(COUNTING_ID, env_kwargs={**kwargs, "nan_key": nan_key})


class StepHookCartPole(CartPole):
    """The torch CartPole calling ``before_step(calls)`` before each ``step_state`` (``calls`` counts from 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def before_step(self, calls: int) -> None:
        """Override: raise, hang or mark a file at a chosen call."""

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        self.calls += 1
        self.before_step(self.calls)
        return super().step_state(state, action, generator, inplace)


class FaultyCartPole(StepHookCartPole):
    """The torch CartPole whose ``fail_at``-th ``step_state`` call raises (``None``: never); for in-process tests."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.fail_at = fail_at

    def before_step(self, calls: int) -> None:
        if calls == self.fail_at:
            raise RuntimeError(f"physics blew up at call {calls}")


class MarkAfterUpdates(Callback):
    """Writes ``path`` once ``updates`` learner updates are done, then sleeps ``sleep_s`` per update (for signals).

    Args:
        path: marker file a test polls for.
        updates: updates to complete before writing it.
        sleep_s: pause after each later update, so the run is still going when the test signals it.
    """

    def __init__(self, path: str, updates: int = 3, sleep_s: float = 0.2) -> None:
        self.path = Path(path)
        self.updates = updates
        self.sleep_s = sleep_s

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if pl_module.updates < self.updates:
            return
        if not self.path.exists():
            self.path.write_text(str(pl_module.updates))
        time.sleep(self.sleep_s)


class RecordRankEnd(Callback):
    """Writes ``<directory>/rank<r>.json`` (updates, env steps) on each DDP rank when its fit ends normally, so a test
    of a CLI run sees every rank's counters, not only those of the checkpoint rank 0 writes."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    def on_train_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        datamodule = trainer.datamodule
        counts = {"updates": pl_module.updates, "env_steps": datamodule.env_steps,
                  "local_env_steps": datamodule.local_env_steps}  # fmt: skip
        (self.directory / f"rank{trainer.global_rank}.json").write_text(json.dumps(counts))
