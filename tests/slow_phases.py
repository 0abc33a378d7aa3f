"""A slow env and a slow-gradient-step callback that count their slow steps in a marker file (created on entry).

The stop tests (``test_stop_phases.py``) make one phase of a real ``rl-lightning fit`` last far longer than their
deadline (collection, random prefill, evaluation, or an update's gradient steps), wait for the marker, send SIGTERM,
time the exit and count the slow steps taken after the signal. Both are named from YAML by class path.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from tensordict import TensorDict

from rl_lightning.envs import Pendulum


def _count(path: Path) -> None:
    """Count one more slow step in ``path`` (created at the first): the test reads how many ran after its signal."""
    done = int(path.read_text()) if path.exists() else 0
    path.write_text(str(done + 1))


class SlowPendulum(Pendulum):
    """The torch Pendulum that sleeps ``sleep_s`` per batched step once it is in the phase under test.

    Args:
        marker: file counting the slow steps, created at the first.
        slow_in: ``"train"`` slows the training env (built from the config), ``"eval"`` the evaluation env
            (built by ``fresh()``).
        after_steps: batched steps this instance takes at full speed first.
        sleep_s: pause per slow step (0 for a resume that should simply finish).
    """

    def __init__(self, marker: str, slow_in: str = "train", after_steps: int = 0, sleep_s: float = 0.2) -> None:
        super().__init__()
        self.marker, self.slow_in, self.after_steps, self.sleep_s = Path(marker), slow_in, after_steps, sleep_s
        self.role = "train"
        self.steps = 0

    def fresh(self, render: bool = False) -> SlowPendulum:
        env = SlowPendulum(str(self.marker), self.slow_in, self.after_steps, self.sleep_s)
        env.role = "eval"
        return env

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        self.steps += 1
        if self.sleep_s > 0 and self.role == self.slow_in and self.steps > self.after_steps:
            _count(self.marker)
            time.sleep(self.sleep_s)
        return super().step_state(state, action, generator, inplace)


class SlowGradientSteps(Callback):
    """Sleeps ``sleep_s`` before every optimiser step once ``after_updates`` updates are done; counts them.

    Args:
        marker: file counting the slow gradient steps, created at the first.
        after_updates: updates completed at full speed first.
        sleep_s: pause per gradient step.
    """

    def __init__(self, marker: str, after_updates: int = 2, sleep_s: float = 0.2) -> None:
        self.marker, self.after_updates, self.sleep_s = Path(marker), after_updates, sleep_s

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: Any, optimizer: Any) -> None:
        if self.sleep_s > 0 and pl_module.updates >= self.after_updates:
            _count(self.marker)
            time.sleep(self.sleep_s)


class SignalAfterUpdates(Callback):
    """Sends this process ``signum`` at the end of update ``updates`` (for in-process stop tests).

    Args:
        signum: the signal number (``2`` SIGINT, ``15`` SIGTERM).
        updates: the update after which to send it.
        then: a second signal sent right after the first (a scheduler's SIGTERM after a user's Ctrl+C).
    """

    def __init__(self, signum: int = 2, updates: int = 1, then: int | None = None) -> None:
        self.signum, self.updates, self.then = signum, updates, then

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if pl_module.updates == self.updates:
            signal.raise_signal(self.signum)
            if self.then is not None:
                signal.raise_signal(self.then)
