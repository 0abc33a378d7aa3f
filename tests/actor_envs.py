"""Envs for the actor-process tests: one that hangs once, one broken for good, one that cannot be pickled."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from rl_lightning.envs import CartPole
from tests.fault_envs import StepHookCartPole


class HangOnceCartPole(StepHookCartPole):
    """The torch CartPole whose ``hang_at``-th ``step_state`` call sleeps for an hour, in the first process to get
    there only (it leaves ``marker`` behind): a replacement actor, copied from the same settings, runs normally."""

    def __init__(self, marker: str, hang_at: int = 5) -> None:
        super().__init__()
        self.marker = marker
        self.hang_at = hang_at

    def before_step(self, calls: int) -> None:
        if calls == self.hang_at and not Path(self.marker).exists():
            Path(self.marker).write_text("hung")
            time.sleep(3600)


class BreaksForGoodCartPole(StepHookCartPole):
    """The torch CartPole whose ``fail_at``-th ``step_state`` call raises and leaves ``marker`` behind; once the
    marker exists every instance raises at its first step (a simulator broken for good, as its restarts find it)."""

    def __init__(self, marker: str, fail_at: int = 40) -> None:
        super().__init__()
        self.marker = marker
        self.fail_at = fail_at

    def before_step(self, calls: int) -> None:
        if Path(self.marker).exists() or calls == self.fail_at:
            Path(self.marker).write_text("broken")
            raise RuntimeError(f"simulator broke at call {calls}")


class LockedCartPole(CartPole):
    """A CartPole holding a live lock, as an env wrapping an open simulator handle would: it cannot be pickled."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
