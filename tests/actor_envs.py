"""Envs for the actor-process tests: one that hangs once, one broken for good, one that cannot be pickled, one
played as games of several lives."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs import CartPole
from tests.fault_envs import FaultyCartPole, StepHookCartPole


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


class LivesCartPole(CartPole):
    """The torch CartPole played as games of ``lives`` episodes, as an Atari preset reports them: each episode is a
    life, and the step that ends a game's last life says ``game_over`` with the game's score (the sum of its lives'
    returns) in ``game_score``. One process's instance keeps each row's lives and score."""

    def __init__(self, lives: int = 1) -> None:
        super().__init__(max_episode_steps=30)
        self.lives = lives
        self._lives_left: torch.Tensor | None = None
        self._score: torch.Tensor | None = None
        self.game_scores: list[float] = []  # every game this instance ended, for a naive mean to compare with

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        state, out = super().step_state(state, action, generator, inplace)
        if self._lives_left is None:
            self._lives_left = torch.full(action.shape, self.lives)
            self._score = torch.zeros(action.shape)
        done = out[keys.TERMINATED] | out[keys.TRUNCATED]
        self._score += out[keys.REWARD]
        self._lives_left -= done.long()
        over = self._lives_left == 0
        out[keys.GAME_OVER] = over
        out[keys.GAME_SCORE] = torch.where(over, self._score, torch.zeros_like(self._score))
        self.game_scores.extend(self._score[over].tolist())
        self._score = torch.where(over, torch.zeros_like(self._score), self._score)
        self._lives_left = torch.where(over, torch.full_like(self._lives_left, self.lives), self._lives_left)
        return state, out


class HangInCloseCartPole(FaultyCartPole):
    """The torch CartPole whose ``fail_at``-th step raises and whose ``close`` then hangs for an hour (a simulator
    wedged by its own crash): the error must reach the learner before the actor tries to close it."""

    def close(self) -> None:
        time.sleep(3600)


class SlowCartPole(StepHookCartPole):
    """The torch CartPole sleeping ``step_s`` before every step: a rollout long enough to publish weights during it."""

    def __init__(self, step_s: float = 0.1) -> None:
        super().__init__()
        self.step_s = step_s

    def before_step(self, calls: int) -> None:
        time.sleep(self.step_s)


class RaisesOnceCartPole(StepHookCartPole):
    """The torch CartPole whose ``fail_at``-th step raises in the first process to get there (it leaves ``marker``
    behind): a user's env with one bad step, which a replacement actor does not meet again."""

    def __init__(self, marker: str, fail_at: int = 40) -> None:
        super().__init__()
        self.marker = marker
        self.fail_at = fail_at

    def before_step(self, calls: int) -> None:
        if calls == self.fail_at and not Path(self.marker).exists():
            Path(self.marker).write_text("raised")
            raise RuntimeError(f"contact solver diverged at call {calls}")


class BreaksOnOneRankCartPole(StepHookCartPole):
    """The torch CartPole broken for good on DDP rank ``rank`` only (``LOCAL_RANK``, which Lightning's launcher sets
    in each rank and its actor processes inherit): there its ``fail_at``-th step raises and leaves ``marker``
    behind, and every restart on that rank raises at its first step; the other rank's envs never fail."""

    def __init__(self, marker: str, rank: int, fail_at: int = 40) -> None:
        super().__init__()
        self.marker = marker
        self.rank = rank
        self.fail_at = fail_at

    def before_step(self, calls: int) -> None:
        if os.environ.get("LOCAL_RANK", "0") != str(self.rank):
            return
        if Path(self.marker).exists() or calls == self.fail_at:
            Path(self.marker).write_text(f"broken on rank {self.rank}")
            raise RuntimeError(f"simulator broke at call {calls} on rank {self.rank}")


class RaisesInActorsCartPole(StepHookCartPole):
    """The torch CartPole whose every ``fail_at``-th step raises in an actor process (any process but the one that
    built it, the learner, whose evaluations play it without failing): each fresh actor meets it again after the
    same number of ticks, an env that raises every few rollouts."""

    def __init__(self, fail_at: int = 40) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.learner_pid = os.getpid()

    def before_step(self, calls: int) -> None:
        if os.getpid() != self.learner_pid and calls % self.fail_at == 0:
            raise RuntimeError(f"contact solver diverged at call {calls}")


class BreaksOnTheBuildersRankCartPole(BreaksOnOneRankCartPole):
    """``BreaksOnOneRankCartPole`` for actors that do not inherit the rank's environment (Ray actors, started by a
    cluster's raylet): the rank is the one whose learner built the env (``LOCAL_RANK`` there), carried with it."""

    def __init__(self, marker: str, rank: int, fail_at: int = 40) -> None:
        super().__init__(marker, rank, fail_at)
        self.built_on = os.environ.get("LOCAL_RANK", "0")

    def before_step(self, calls: int) -> None:
        if self.built_on != str(self.rank):
            return
        if Path(self.marker).exists() or calls == self.fail_at:
            Path(self.marker).write_text(f"broken on rank {self.rank}")
            raise RuntimeError(f"simulator broke at call {calls} on rank {self.rank}")
