"""Seeds of one group on one env-step grid, their mean and a bootstrap confidence band (resampling seeds).

The wall-time panel draws the same curve against the wall time the seeds took to reach each env step (their mean):
seeds reach a step at different times, and aligning them on wall time instead would leave nothing to compare where
they logged a single point each.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rl_lightning.errors import ConfigError


@dataclass(frozen=True)
class Band:
    """A group's curve: at each ``x`` the mean over its seeds and a ``[low, high]`` bootstrap interval of that mean.

    Attributes:
        x: float64 ``[T]``, env steps.
        wall: float64 ``[T]``, the mean over seeds of the wall seconds at which each reached ``x``.
        mean: float64 ``[T]``.
        low: float64 ``[T]``.
        high: float64 ``[T]``.
        seeds: how many runs the mean is over.
    """

    x: np.ndarray
    wall: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    seeds: int


def align(curves: Sequence[tuple[np.ndarray, np.ndarray]], points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Put each seed's ``(x, y)`` on one grid: ``(grid [T], values [S, T])``.

    Seeds logged at the same ``x`` (the same env steps, as evaluations every N env steps are) keep those points.
    Otherwise each is interpolated linearly onto ``points`` evenly spaced ``x`` over the range all seeds cover (from
    the latest first point to the earliest last one), so a curve ends where its shortest seed ends.
    """
    ordered = [_by_x(np.asarray(x, np.float64), np.asarray(y, np.float64)) for x, y in curves]
    first = ordered[0][0]
    if all(x.shape == first.shape and np.array_equal(x, first) for x, _ in ordered):
        return first, np.stack([y for _, y in ordered])
    start, end = max(float(x[0]) for x, _ in ordered), min(float(x[-1]) for x, _ in ordered)
    if start > end:
        raise ConfigError(
            f"the seeds' curves share no range of x (one starts at {start:g}, one ends at {end:g}); "
            "draw them in separate groups with --label"
        )
    grid = np.linspace(start, end, points) if end > start else np.array([start])
    return grid, np.stack([np.interp(grid, x, y) for x, y in ordered])


def bootstrap(
    values: np.ndarray, rng: np.random.Generator, reps: int = 2000, ci: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval ``(low [T], high [T])`` of the mean over seeds of ``values [S, T]``.

    Each of ``reps`` resamples draws ``S`` seeds with replacement (the same seeds at every ``x``, so a resample is a
    whole-curve one); one seed gives a zero-width band.
    """
    picks = rng.integers(0, values.shape[0], size=(reps, values.shape[0]))
    means = values[picks].mean(axis=1)  # [reps, T]
    low, high = np.percentile(means, [50 * (1 - ci), 50 * (1 + ci)], axis=0)
    return low, high


def band(
    seeds: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    rng: np.random.Generator,
    reps: int = 2000,
    ci: float = 0.95,
    points: int = 200,
) -> Band:
    """The ``Band`` of a group's seeds, each ``(steps, wall, values)``: ``align`` then ``bootstrap``."""
    grid, values = align([(steps, y) for steps, _, y in seeds], points)
    _, wall = align([(steps, w) for steps, w, _ in seeds], points)
    low, high = bootstrap(values, rng, reps, ci)
    return Band(x=grid, wall=wall.mean(axis=0), mean=values.mean(axis=0), low=low, high=high, seeds=values.shape[0])


def _by_x(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(x, kind="stable")
    return x[order], y[order]


def generator(seed: int, *names: str) -> np.random.Generator:
    """A ``numpy.random.Generator`` for one curve: ``seed`` and the curve's names (task, metric, group), so a
    band does not change when other groups are added to the figure."""
    return np.random.default_rng([seed, *(zlib.crc32(name.encode()) for name in names)])
