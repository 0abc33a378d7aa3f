"""Envs for the actor-process tests: one that hangs once, one that cannot cross a process boundary."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import torch
from tensordict import TensorDict

from rl_lightning.envs import CartPole


class HangOnceCartPole(CartPole):
    """The torch CartPole whose ``hang_at``-th ``step_state`` call sleeps for an hour, in the first process to get
    there only (it leaves ``marker`` behind): a replacement actor, copied from the same settings, runs normally."""

    def __init__(self, marker: str, hang_at: int = 5) -> None:
        super().__init__()
        self.marker = marker
        self.hang_at = hang_at
        self.calls = 0

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        self.calls += 1
        if self.calls == self.hang_at and not Path(self.marker).exists():
            Path(self.marker).write_text("hung")
            time.sleep(3600)
        return super().step_state(state, action, generator, inplace)


class LockedCartPole(CartPole):
    """A CartPole holding a live lock, as an env wrapping an open simulator handle would: it cannot be pickled."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()


class BreaksForGoodCartPole(CartPole):
    """The torch CartPole whose ``fail_at``-th ``step_state`` call raises and leaves ``marker`` behind; once the
    marker exists every instance raises at its first step (a simulator broken for good, as its restarts find it)."""

    def __init__(self, marker: str, fail_at: int = 40) -> None:
        super().__init__()
        self.marker = marker
        self.fail_at = fail_at
        self.calls = 0

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        self.calls += 1
        if Path(self.marker).exists() or self.calls == self.fail_at:
            Path(self.marker).write_text("broken")
            raise RuntimeError(f"simulator broke at call {self.calls}")
        return super().step_state(state, action, generator, inplace)
