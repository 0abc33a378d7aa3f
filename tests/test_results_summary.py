"""The run summary JSON (``rl_lightning.results.summary``): written from an event folder, read back as the same run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rl_lightning.errors import ConfigError
from rl_lightning.results import summary
from rl_lightning.results.events import read_run
from tests.test_plot_cli import RETURNS, START, STEPS, WALL, write_run


def test_write_summary_round_trips_every_scalar_and_the_runs_identity(tmp_path):
    scalars = {"eval/episode_return": RETURNS[2], "a/b": [1, 2, 3, 4]}
    folder = write_run(tmp_path / "runs" / "ppo" / "version_0", scalars, WALL[2], seed=2)
    path = summary.write_summary(folder, tmp_path / "s" / "run.json")
    data = json.loads(path.read_text())
    assert data["format"] == summary.FORMAT
    assert (data["task"], data["seed"], data["config"], data["algorithm"]) == ("CartPole", 2, "ppo_cartpole", "PPO")
    assert (data["env_steps"], data["wall_seconds"]) == (STEPS[-1], WALL[2][-1])
    assert data["scalars"]["eval/episode_return"]["wall_times"] == WALL[2]  # counted from the first event, START
    original, back = read_run(folder), summary.read_summary(path)
    assert (back.task, back.seed, back.config, back.digest) == (original.task, original.seed, original.config,
                                                                original.digest)  # fmt: skip
    assert sorted(back.scalars) == sorted(original.scalars) == ["a/b", "eval/episode_return"]
    for tag, series in original.scalars.items():
        for field in ("steps", "wall", "values"):
            np.testing.assert_array_equal(getattr(back.scalars[tag], field), getattr(series, field))
    assert START > 0  # the events' own wall times are far from the offsets the summary keeps


def test_a_json_that_is_not_a_summary_is_refused_in_one_line(tmp_path):
    (tmp_path / "x.json").write_text('{"format": "something/2"}')
    with pytest.raises(ConfigError, match="not a run summary of format rl_lightning.run_summary/1"):
        summary.read_summary(tmp_path / "x.json")
