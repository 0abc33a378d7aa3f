"""``Ratio``: how many gradient steps follow each batch of policy steps (replay ratio; DESIGN §5).

Semantics of Hafner's ``embodied.when.Ratio`` and sheeprl's ``utils.Ratio`` (research/dreamer.md §12.1), with exact
rational bookkeeping so that no fractional update is ever lost or double counted::

    policy steps   0 ──────────── s1 ───── s2 ─────────── s3
    updates        pretrain + ⌊s1·r⌋   then ⌊s·r⌋ − (updates already given), i.e. Σ = pretrain + ⌊s·r⌋

``policy_steps`` is counted **after** ``learning_starts``: the caller subtracts the prefill, so the first training
iteration passes the policy steps of that one iteration (not the whole prefill).
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Real
from typing import Any

from rl_lightning.errors import ConfigError


class Ratio:
    """Gradient steps per policy step, with the fractional remainder carried from call to call.

    The first call returns ``pretrain_steps + ⌊policy_steps·ratio⌋``; every later call returns
    ``n = ⌊(policy_steps − prev)·ratio⌋`` and advances ``prev`` by ``n / ratio`` (only the policy steps actually
    consumed), so after any sequence of calls the updates given total ``pretrain_steps + ⌊policy_steps·ratio⌋``
    exactly. The first call likewise sets ``prev = ⌊policy_steps·ratio⌋ / ratio``, keeping its fractional remainder
    (sheeprl sets ``prev = policy_steps`` there, which can leave the total one short for good).
    ``ratio = 0`` always returns 0 (a dream-free run).

    A float ratio is read as the simplest fraction that rounds to the same float (``0.1`` → 1/10, ``1/3`` → 1/3), so
    ``⌊10 · 0.1⌋ = 1`` and ``⌊3 · (1/3)⌋ = 1`` as the user meant, not as binary rounding would have it.

    Args:
        ratio: gradient steps per policy step (sheeprl's ``replay_ratio`` = DreamerV3's train_ratio / (B·T),
            e.g. 512 / (16·64) = 0.5); ``>= 0``.
        pretrain_steps: extra gradient steps run once, at the first call (sheeprl's ``per_rank_pretrain_steps``).
    """

    def __init__(self, ratio: float, pretrain_steps: int = 0) -> None:
        if isinstance(ratio, bool) or not isinstance(ratio, Real) or not math.isfinite(ratio) or ratio < 0:
            raise ConfigError(
                f"data.replay_ratio={ratio!r} must be a finite number >= 0; use e.g. 0.5 (0 disables training)"
            )
        if isinstance(pretrain_steps, bool) or not isinstance(pretrain_steps, int) or pretrain_steps < 0:
            raise ConfigError(f"data.pretrain_steps={pretrain_steps!r} must be an int >= 0; use 0 for none or e.g. 100")
        self._ratio = _exact(ratio)
        self._pretrain_steps = pretrain_steps
        self._prev: Fraction | None = None  # None until the first call

    @property
    def ratio(self) -> float:
        """Gradient steps per policy step."""
        return float(self._ratio)

    @property
    def pretrain_steps(self) -> int:
        """Gradient steps added once at the first call."""
        return self._pretrain_steps

    @property
    def started(self) -> bool:
        """Whether the first call (or a ``realign``) has happened, so pretraining is done."""
        return self._prev is not None

    def __call__(self, policy_steps: int) -> int:
        """Gradient steps to run now.

        Args:
            policy_steps: policy steps so far, counted after ``learning_starts``; never decreasing.

        Returns:
            The number of gradient steps due (a Python int, ``>= 0``).

        Raises:
            ValueError: if ``policy_steps`` is negative or went back below the steps already consumed.
        """
        _check_steps(policy_steps)
        if self._ratio == 0:
            return 0
        if self._prev is None:
            due = math.floor(policy_steps * self._ratio)
            self._prev = due / self._ratio
            return self._pretrain_steps + due
        if policy_steps < self._prev:
            raise ValueError(
                f"policy_steps={policy_steps} is below the {float(self._prev):g} steps already consumed; "
                "the counter went backwards: call realign(policy_steps) after resetting it"
            )
        due = math.floor((policy_steps - self._prev) * self._ratio)
        self._prev += due / self._ratio
        return due

    def realign(self, policy_steps: int) -> None:
        """Forget updates owed before ``policy_steps`` (after a resume) and mark pretraining done.

        The next call returns only the updates due for the policy steps taken after ``policy_steps``, so a restored
        scheduler whose counter is behind the run's does not fire a burst of catch-up updates (sheeprl PR #280).

        Args:
            policy_steps: the run's current policy-step count, as later passed to ``__call__``.
        """
        _check_steps(policy_steps)
        self._prev = Fraction(policy_steps)

    def state_dict(self) -> dict[str, Any]:
        """``prev`` (``None`` before the first call, else an exact ``"p/q"`` string), plus the config for inspection."""
        return {
            "ratio": str(self._ratio),
            "pretrain_steps": self._pretrain_steps,
            "prev": None if self._prev is None else str(self._prev),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the progress (``prev``); ``ratio`` and ``pretrain_steps`` stay the constructor's (the config).

        ``prev`` counts policy steps, not updates, so resuming with a changed ratio applies the new ratio from here on.
        """
        prev = state["prev"]
        self._prev = None if prev is None else Fraction(prev)


def _exact(ratio: float) -> Fraction:
    """The simplest fraction (denominator ≤ 10⁶) that rounds to ``ratio``, else its exact binary value."""
    exact = Fraction(ratio)
    simple = exact.limit_denominator(1_000_000)
    return simple if float(simple) == float(ratio) else exact


def _check_steps(policy_steps: int) -> None:
    if isinstance(policy_steps, bool) or not isinstance(policy_steps, int) or policy_steps < 0:
        raise ValueError(f"policy_steps={policy_steps!r} must be an int >= 0 (policy steps after learning_starts)")
