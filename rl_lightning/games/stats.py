"""Statistics for judging a game agent: means with Student-t intervals, Wilson intervals for rates, and p-values.

Pure functions on 1-D samples (numpy arrays, tensors or sequences, read as float64), no torch state. Every
interval is two-sided at ``confidence`` (default 95%). The distributions' quantiles and tails come from
``scipy.stats`` (the games extra installs it): the Student t quantile and tail need the regularised incomplete
beta function, and the exact two-sided binomial test sums the tail by likelihood, both of which scipy does well.

Edge cases, the same in every function:

* fewer than two samples: a t interval or t-test has no variance estimate, so its bounds and p-value are NaN
  (the mean itself is still reported);
* zero variance (every sample equal, e.g. duplicate deals that cancel exactly): the interval is ``[mean, mean]``
  and the p-value is 0.0 when the mean difference is non-zero, 1.0 when it is zero (the limits of the t-test as
  the variance goes to zero); scipy would return NaN with a warning there;
* a rate of zero trials: NaN rate and bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Interval:
    """A point estimate with its two-sided confidence interval.

    Attributes:
        mean: the estimate (a sample mean or a rate).
        low: lower bound of the interval (NaN when it cannot be estimated).
        high: upper bound.
        n: the number of samples (or trials) behind it.
    """

    mean: float
    low: float
    high: float
    n: int


def _sample(values: Any, name: str = "values") -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sample, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name}: the sample holds NaN or infinite values; scores must be finite")
    return array


def _stats():
    try:
        from scipy import stats
    except ImportError as err:
        raise ImportError(f"rl_lightning.games needs scipy ({err}); install the games extra: pip install "
                          "-e '.[games]'") from None  # fmt: skip
    return stats


def mean_interval(values: Any, confidence: float = 0.95) -> Interval:
    """Sample mean with its Student-t interval ``mean ± t_{(1+c)/2, n-1} · s / sqrt(n)`` (s: unbiased std)."""
    x = _sample(values)
    n = len(x)
    if n == 0:
        raise ValueError("mean_interval: the sample is empty; play at least one game")
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    half = float(_stats().t.ppf((1 + confidence) / 2, n - 1)) * float(x.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> Interval:
    """A rate ``k / n`` with its Wilson score interval (Wilson 1927), sound near 0 and 1 where the normal one is not.

    ``(p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)`` with ``z`` the normal quantile at ``(1+c)/2``.
    """
    if trials < 0 or not 0 <= successes <= max(trials, 0):
        raise ValueError(f"wilson_interval: need 0 <= successes <= trials, got successes={successes}, "
                         f"trials={trials}")  # fmt: skip
    if trials == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    z = float(_stats().norm.ppf((1 + confidence) / 2))
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), trials)


def _t_p_value(mean: float, se: float, dof: float) -> float:
    """Two-sided p of ``t = mean / se`` with ``dof`` degrees of freedom (zero-variance limits: module docstring)."""
    if se == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    return float(2 * _stats().t.sf(abs(mean / se), dof))


def paired_p_value(a: Any, b: Any) -> float:
    """Two-sided paired t-test of ``mean(a - b) = 0``: ``a[i]`` and ``b[i]`` were played on the same deal.

    Why this test: the question is whether the mean score differs (points per hand is what players count), and
    per-deal differences of hundreds of deals are close to normal by the central limit theorem even though
    Hearts points are not. A Wilcoxon signed-rank test asks about the median of a symmetric difference and a
    sign test only about its sign; both handle the many exact ties of card-game scores poorly.
    """
    x, y = _sample(a, "a"), _sample(b, "b")
    if len(x) != len(y):
        raise ValueError(f"paired_p_value: the samples are paired by deal but have {len(x)} and {len(y)} values")
    d = x - y
    if len(d) < 2:
        return math.nan
    return _t_p_value(float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(d)), len(d) - 1)


def welch_p_value(a: Any, b: Any) -> float:
    """Two-sided Welch t-test of ``mean(a) = mean(b)`` for independent samples (unequal variances allowed).

    Degrees of freedom by the Welch–Satterthwaite equation.
    """
    x, y = _sample(a, "a"), _sample(b, "b")
    if len(x) < 2 or len(y) < 2:
        return math.nan
    vx, vy = float(x.var(ddof=1)) / len(x), float(y.var(ddof=1)) / len(y)
    se2 = vx + vy
    if se2 == 0.0:
        return _t_p_value(float(x.mean() - y.mean()), 0.0, 1.0)
    dof = se2 * se2 / (vx * vx / (len(x) - 1) + vy * vy / (len(y) - 1))
    return _t_p_value(float(x.mean() - y.mean()), math.sqrt(se2), dof)


def binomial_p_value(successes: int, trials: int, p: float = 0.5) -> float:
    """Exact two-sided binomial test of ``rate = p`` (for wins against losses: a sign test, draws left out).

    NaN for zero trials.
    """
    if trials < 0 or not 0 <= successes <= max(trials, 0):
        raise ValueError(f"binomial_p_value: need 0 <= successes <= trials, got successes={successes}, "
                         f"trials={trials}")  # fmt: skip
    if trials == 0:
        return math.nan
    return float(_stats().binomtest(successes, trials, p).pvalue)
