"""Seeds aligned on one env-step grid and the bootstrap band of their mean (``rl_lightning.results.curves``)."""

from __future__ import annotations

import numpy as np
import pytest

from rl_lightning.errors import ConfigError
from rl_lightning.results import curves


def test_seeds_logged_at_the_same_steps_keep_those_steps():
    steps = np.array([100, 200, 300])
    grid, values = curves.align([(steps, [1.0, 2.0, 3.0]), (steps, [3.0, 4.0, 5.0])])
    np.testing.assert_array_equal(grid, steps)
    np.testing.assert_array_equal(values, [[1, 2, 3], [3, 4, 5]])


def test_seeds_logged_at_different_steps_are_interpolated_over_the_range_all_cover():
    grid, values = curves.align([([0, 100, 200], [0.0, 10.0, 20.0]), ([50, 150], [5.0, 25.0])], points=5)
    np.testing.assert_allclose(grid, [50, 75, 100, 125, 150])
    np.testing.assert_allclose(values[0], grid / 10)  # y = x / 10 on the first seed
    np.testing.assert_allclose(values[1], 5 + (grid - 50) / 5)


def test_seeds_that_share_no_range_are_refused():
    with pytest.raises(ConfigError, match="share no range"):
        curves.align([([0, 10], [1.0, 2.0]), ([20, 30], [1.0, 2.0])])


def test_the_band_holds_the_mean_and_is_the_same_under_the_same_seed():
    rng = np.random.default_rng(7)
    values = rng.normal(size=(5, 30)).cumsum(axis=1)
    low, high = curves.bootstrap(values, curves.generator(0, "task", "metric", "group"))
    again = curves.bootstrap(values, curves.generator(0, "task", "metric", "group"))
    other = curves.bootstrap(values, curves.generator(1, "task", "metric", "group"))
    mean = values.mean(axis=0)
    assert np.all(low <= mean)
    assert np.all(mean <= high)
    assert np.all(high - low > 0)
    np.testing.assert_array_equal(low, again[0])
    np.testing.assert_array_equal(high, again[1])
    assert not np.array_equal(low, other[0])
    # a wider level gives a band at least as wide
    wide_low, wide_high = curves.bootstrap(values, curves.generator(0, "task", "metric", "group"), ci=0.99)
    assert np.all(wide_high - wide_low >= high - low - 1e-12)


def test_the_percentile_band_matches_a_naive_loop_over_resamples():
    values = np.array([[1.0, 2.0], [3.0, 5.0], [8.0, 13.0]])
    low, high = curves.bootstrap(values, np.random.default_rng(3), reps=500, ci=0.9)
    rng = np.random.default_rng(3)
    picks = rng.integers(0, 3, size=(500, 3))
    means = np.array([[values[p, t].mean() for t in range(2)] for p in picks])
    np.testing.assert_allclose(low, np.percentile(means, 5, axis=0))
    np.testing.assert_allclose(high, np.percentile(means, 95, axis=0))


def test_one_seed_has_a_band_of_zero_width_and_its_wall_time_per_step():
    band = curves.band([(np.array([10, 20]), np.array([1.0, 3.0]), np.array([5.0, 6.0]))], np.random.default_rng(0))
    np.testing.assert_array_equal(band.low, band.mean)
    np.testing.assert_array_equal(band.high, band.mean)
    np.testing.assert_array_equal(band.wall, [1.0, 3.0])
    assert band.seeds == 1


def test_the_wall_axis_is_the_mean_time_the_seeds_took_to_each_step():
    seeds = [(np.array([10, 20]), np.array([1.0, 2.0]), np.array([0.0, 1.0])),
             (np.array([10, 20]), np.array([3.0, 6.0]), np.array([2.0, 3.0]))]  # fmt: skip
    band = curves.band(seeds, np.random.default_rng(0))
    np.testing.assert_array_equal(band.x, [10, 20])
    np.testing.assert_array_equal(band.wall, [2.0, 4.0])
    np.testing.assert_array_equal(band.mean, [1.0, 2.0])
