"""The rliable aggregate (``rl_lightning.results.aggregate``): its IQM is the naive one, its interval reproducible."""

from __future__ import annotations

import numpy as np
import pytest

from rl_lightning.errors import ConfigError
from rl_lightning.results import aggregate
from rl_lightning.results.options import Normalise
from rl_lightning.results.run import Run, Series

pytest.importorskip("rliable")


def _run(task: str, final: float, algorithm: str = "PPO", label: str | None = None) -> Run:
    series = Series(steps=np.array([1, 2]), wall=np.array([1.0, 2.0]), values=np.array([0.0, final]))
    return Run(source=f"{task}/{final}", task=task, config=f"ppo_{task}", digest="d", algorithm=algorithm, seed=None,
               scalars={"eval/episode_return": series}, label=label)  # fmt: skip


RANGES = [Normalise("A", 0.0, 10.0), Normalise("B", -100.0, 100.0)]


def test_iqm_equals_a_trimmed_mean_of_the_normalised_finals_and_leaves_numpys_state_alone():
    from scipy.stats import trim_mean

    finals = {"A": [1.0, 4.0, 9.0, 10.0, 2.0], "B": [-100.0, 0.0, 50.0, 100.0, 20.0]}
    runs = [_run(task, x) for task, xs in finals.items() for x in xs]
    matrices = aggregate.scores(runs, "eval/episode_return", RANGES)
    expected = np.array([[a / 10, (b + 100) / 200] for a, b in zip(finals["A"], finals["B"])])
    np.testing.assert_allclose(matrices["PPO"], expected)
    np.random.seed(5)
    before = np.random.random()
    np.random.seed(5)
    (row,) = aggregate.interquartile_means(matrices, ["A", "B"], reps=500, seed=0)
    assert np.random.random() == before  # the caller's global state is put back
    assert row.iqm == pytest.approx(trim_mean(expected, 0.25, axis=None))
    assert row.low <= row.iqm <= row.high
    (again,) = aggregate.interquartile_means(matrices, ["A", "B"], reps=500, seed=0)
    assert (again.low, again.high) == (row.low, row.high)


def test_labels_are_the_algorithms_and_unequal_runs_per_task_are_refused():
    runs = [_run("A", 1, label="mine"), _run("B", 1, label="mine"), _run("A", 2, label="theirs"),
            _run("B", 2, label="theirs"), _run("B", 3, label="theirs")]  # fmt: skip
    unequal = r"theirs has runs of eval/episode_return in unequal numbers per task \(A: 1, B: 2\)"
    with pytest.raises(ConfigError, match=unequal):
        aggregate.scores(runs, "eval/episode_return", RANGES)
    assert sorted(aggregate.scores(runs[:4], "eval/episode_return", RANGES)) == ["mine", "theirs"]
