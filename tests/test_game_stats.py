"""rl_lightning.games.stats against closed forms, tabulated quantiles and scipy's own tests, on synthetic scores."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats as sps

from rl_lightning.games.stats import (
    binomial_p_value,
    mean_interval,
    paired_p_value,
    welch_p_value,
    wilson_interval,
)


def test_mean_interval_matches_the_tabulated_t_quantile() -> None:
    # x = 1..5: mean 3, s = sqrt(2.5), t_{0.975, 4} = 2.776445105 (printed t tables).
    interval = mean_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.776445105 * math.sqrt(2.5) / math.sqrt(5)
    assert interval.mean == 3.0
    assert interval.n == 5
    assert interval.low == pytest.approx(3.0 - half, abs=1e-8)
    assert interval.high == pytest.approx(3.0 + half, abs=1e-8)


def test_mean_interval_covers_a_known_mean_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(0)
    samples = rng.normal(2.0, 3.0, size=(4_000, 8))  # small n: a normal quantile would under-cover (about 92%)
    covered = [(lambda i: i.low <= 2.0 <= i.high)(mean_interval(row)) for row in samples]
    assert abs(np.mean(covered) - 0.95) < 0.012


def test_mean_interval_accepts_tensors_and_handles_edge_cases() -> None:
    assert mean_interval(torch.tensor([1.0, 3.0])).mean == 2.0
    single = mean_interval([4.0])  # no variance estimate: NaN bounds, the mean kept
    assert single.mean == 4.0
    assert math.isnan(single.low)
    assert math.isnan(single.high)
    constant = mean_interval([6.5] * 10)
    assert (constant.low, constant.high) == (6.5, 6.5)
    with pytest.raises(ValueError, match="empty"):
        mean_interval([])
    with pytest.raises(ValueError, match="NaN"):
        mean_interval([1.0, math.nan])


def test_wilson_interval_closed_forms() -> None:
    z = 1.959963984540054
    none = wilson_interval(0, 10)  # k = 0: [0, z²/(n+z²)]
    assert none.mean == 0.0
    assert none.low == pytest.approx(0.0)
    assert none.high == pytest.approx(z * z / (10 + z * z), abs=1e-12)
    every = wilson_interval(10, 10)  # k = n: [n/(n+z²), 1]
    assert every.low == pytest.approx(10 / (10 + z * z), abs=1e-12)
    assert every.high == pytest.approx(1.0)
    half = wilson_interval(50, 100)
    centre, width = 0.5, z * math.sqrt(0.25 / 100 + z * z / 40_000) / (1 + z * z / 100)
    assert (half.low, half.high) == (pytest.approx(centre - width), pytest.approx(centre + width))
    assert math.isnan(wilson_interval(0, 0).mean)
    with pytest.raises(ValueError, match="successes=3, trials=2"):
        wilson_interval(3, 2)


def test_paired_p_value_matches_scipy_and_uses_the_pairing() -> None:
    rng = np.random.default_rng(1)
    deal = rng.normal(0.0, 5.0, 400)  # a large per-deal effect both players share
    a = deal + rng.normal(0.3, 1.0, 400)
    b = deal + rng.normal(0.0, 1.0, 400)
    assert paired_p_value(a, b) == pytest.approx(sps.ttest_rel(a, b).pvalue, rel=1e-10)
    assert paired_p_value(a, b) < 1e-3  # the pairing removes the deal's variance ...
    assert welch_p_value(a, b) > 0.05  # ... which an unpaired test cannot see through


def test_paired_p_value_edge_cases() -> None:
    a = np.arange(10.0)
    assert paired_p_value(a + 1.0, a) == 0.0  # a known constant difference: zero variance, non-zero mean
    assert paired_p_value(a, a) == 1.0
    assert math.isnan(paired_p_value([1.0], [0.0]))
    with pytest.raises(ValueError, match="paired by deal"):
        paired_p_value([1.0, 2.0], [1.0])


def test_welch_p_value_matches_scipy_and_a_closed_form() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.normal(1.0, 1.0, 30), rng.normal(0.5, 3.0, 50)
    assert welch_p_value(a, b) == pytest.approx(sps.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-10)
    # Closed form for equal sizes and variances: Welch's dof is 2(n-1) and t = (ma - mb) / sqrt(2 s² / n).
    x, y = np.array([1.0, 2.0, 3.0]), np.array([2.0, 3.0, 4.0])
    assert welch_p_value(x, y) == pytest.approx(2 * sps.t.sf(1 / math.sqrt(2 / 3), 4), rel=1e-12)
    assert welch_p_value([2.0, 2.0], [1.0, 1.0]) == 0.0
    assert math.isnan(welch_p_value([1.0], [1.0, 2.0]))


def test_binomial_p_value_closed_forms() -> None:
    assert binomial_p_value(0, 5) == pytest.approx(2 / 32)
    assert binomial_p_value(9, 10) == pytest.approx(2 * 11 / 1024)
    assert binomial_p_value(5, 10) == pytest.approx(1.0)
    assert math.isnan(binomial_p_value(0, 0))
    with pytest.raises(ValueError, match="successes=-1"):
        binomial_p_value(-1, 4)
