"""Trick-level rewards for OpenSpiel Hearts (``OpenSpielEnv(reward="trick")``): each trick's points are paid when
the trick ends, to the seat that took it, instead of all at once when the hand ends.

OpenSpiel pays Hearts only at the end: ``returns() = 26 - points`` per seat (``points`` after the moon rule: a seat
that took every heart and the queen of spades scores 0 and every other seat 26 more). This shaper leaves that
payment where it is and moves the points earlier: when a trick ends before the last one, its taker receives
``-(its points)`` (the engine's running ``state.points``, which counts each trick's hearts and queen as it ends);
on the hand's last tick every seat gets back what it was charged, so the hand's sum per seat is still exactly
``returns()`` (shooting the moon scored as the engine scores it, in that last payment, which also holds the last
trick's points). Only the timing changes: the credit of a card reaches the decisions of its trick, not 13 tricks
later.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: ``OpenSpielEnv``'s ``reward`` choices: the engine's own payments, or Hearts' points paid per trick.
REWARDS = ("engine", "trick")


class TrickReward:
    """Pays Hearts' points per trick on top of the engine's terminal returns (module docstring)."""

    def __init__(self, num_seats: int) -> None:
        self.seats = range(num_seats)

    def taken(self, state: Any) -> np.ndarray:
        """Each seat's points so far, read before a move."""
        return np.array([state.points(seat) for seat in self.seats], dtype=np.float32)

    def pay(self, state: Any, taken: np.ndarray, reward: np.ndarray) -> None:
        """Add to ``reward`` ``[S]`` what the move (and the chance after it) paid, given ``taken`` before it."""
        if state.is_terminal():  # the engine's returns pay the whole hand now: refund what was charged earlier
            reward += taken
        else:
            reward -= self.taken(state) - taken
