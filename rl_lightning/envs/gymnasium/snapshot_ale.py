"""ALE state for snapshots: ``cloneState(include_rng=True)`` plus the sticky-action memory it leaves out.

With sticky actions (``repeat_action_probability`` p > 0, ``ALE/*-v5`` and the ``machado`` preset) each emulated
frame repeats the previously applied action with probability p. ALE keeps that action in its environment object,
outside the state ``cloneState`` serialises, so a restored copy would repeat its own last action, not the
source's, and drift within a step. ``StickyAle`` stands in for an env's ``ALEInterface`` and tracks that action:
ALE draws the sticky coin from a ``std::mt19937`` seeded with the ``random_seed`` setting at ``loadROM``, two draws
per ``act`` frame (players A and B), applying player A's action when ``draw / 2**32 >= p``; a Python
``random.Random`` (also MT19937, given the same initial state) replays those draws beside it. A copy first makes
the target apply the source's held action (it acts until the coin lets the action through), then restores the
source's state over it. The snapshot tests compare copies and originals frame by frame, so a change in ALE's
scheme shows up there.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

#: ``ale_py.Action.NOOP``: what ALE holds after a reset.
_NOOP = 0
_TWO_32 = 4294967296.0


def _mt19937(seed: int) -> random.Random:
    """A ``random.Random`` in the state of C++ ``std::mt19937(seed)`` (numpy's legacy seeding is the same)."""
    bits = np.random.MT19937()
    bits._legacy_seeding(seed)
    rng = random.Random()
    rng.setstate((3, (*(int(k) for k in bits.state["state"]["key"]), 624), None))
    return rng


class StickyAle:
    """An ``ale_py.ALEInterface`` that also knows which action ALE holds for sticky repeats.

    Everything is forwarded to the wrapped interface; ``act``, ``reset_game`` and ``loadROM`` also update
    ``held`` (the held action and paddle strength) and the replica of ALE's sticky-action RNG.
    """

    def __init__(self, ale: Any) -> None:
        self.ale = ale
        self._sync()

    def __getattr__(self, name: str) -> Any:
        if name == "ale":  # not set yet (an object being unpickled or copied): no recursion
            raise AttributeError(name)
        return getattr(self.ale, name)

    def _sync(self) -> None:
        """After ``loadROM``: ALE re-read its settings, re-seeded its RNG and holds NOOP."""
        self.p = self.ale.getFloat("repeat_action_probability")
        self.frames = self.ale.getInt("frame_skip")
        self.rng = _mt19937(self.ale.getInt("random_seed") & 0xFFFFFFFF)
        self.held: tuple[Any, float] = (_NOOP, 1.0)

    def act(self, action: Any, paddle_strength: float = 1.0) -> int:
        for _ in range(self.frames):
            if self.rng.getrandbits(32) / _TWO_32 >= self.p:
                self.held = (action, paddle_strength)
            self.rng.getrandbits(32)  # player B's coin
        return self.ale.act(action, paddle_strength)

    def reset_game(self) -> None:
        self.ale.reset_game()
        self.held = (_NOOP, 1.0)

    def loadROM(self, path: Any) -> None:  # noqa: N802 (ALE's name)
        self.ale.loadROM(path)
        self._sync()

    def restoreState(self, state: Any) -> None:  # noqa: N802 (ALE's name)
        raise RuntimeError(
            "StickyAle.restoreState: a restored ALE state lacks the held sticky action; copy envs with "
            "rl_lightning.envs.gymnasium.snapshot_ale.copy_ale"
        )

    def hold(self, held: tuple[Any, float]) -> None:
        """Make ALE hold ``held``: act with it until a coin applies it (this emulates frames; restore after)."""
        for _ in range(10_000):
            if self.held == held:
                return
            self.act(*held)
        raise RuntimeError(f"ALE with repeat_action_probability={self.p} never applied action {held[0]}")


def copy_ale(src: Any, dst: Any) -> None:
    """Put ``dst`` (an ``ALEInterface`` or ``StickyAle`` of the same game and settings) in ``src``'s exact state."""
    state = src.cloneState(include_rng=True)
    if isinstance(src, StickyAle):
        dst.hold(src.held)
        dst.ale.restoreState(state)
        dst.rng.setstate(src.rng.getstate())
    else:
        dst.restoreState(state)


def track_sticky(env: Any) -> None:
    """Give ``env`` (an unwrapped ``AtariEnv``) a ``StickyAle`` when its actions are sticky, so it can be copied."""
    ale = env.ale
    if not isinstance(ale, StickyAle) and ale.getFloat("repeat_action_probability") > 0:
        env.ale = StickyAle(ale)
