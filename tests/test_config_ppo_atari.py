"""``configs/ppo_atari.yaml`` as a user runs it: a CLI fit on each C++ Atari backend, ending with an evaluation of
whole games (raw score) and a checkpoint. The Evaluation callback's env copy used to fail on these backends
(``fresh(render=...)`` was not accepted)."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.cli_subprocess import ROOT
from tests.test_env_gymnasium_cli import run_cli

TINY = {
    "data": {"init_args": {"num_envs": 4, "num_steps": 16, "total_env_steps": 64}},
    "model": {"init_args": {"update_epochs": 1, "num_minibatches": 2}},
    "trainer": {"enable_progress_bar": False},
}
BACKENDS = [
    pytest.param("AleVectorEnv", "ale_py", id="ale_vector"),
    pytest.param("EnvPoolEnv", "envpool", id="envpool", marks=pytest.mark.slow),  # EnvPool's eval form: the matrix
]


@pytest.mark.parametrize(("backend", "package"), BACKENDS)
def test_ppo_atari_config_fits_evaluates_whole_games_and_checkpoints(tmp_path, backend, package):
    if importlib.util.find_spec(package) is None or importlib.util.find_spec("ale_py") is None:
        pytest.skip(f"needs {package}")
    env = {
        "class_path": f"rl_lightning.envs.{backend}",
        "init_args": {"env_id": "Breakout", "atari_preset": "baselines"},
    }
    done = run_cli(tmp_path, env, base=str(ROOT / "configs" / "ppo_atari.yaml"), tiny=TINY)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (tmp_path / "runs" / "ppo_atari").iterdir()
    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    (point,) = acc.Scalars("eval/episode_return")  # the end-of-fit evaluation: whole games
    assert point.step == 64
    lengths = acc.Scalars("eval/episode_length")
    assert lengths[0].value > 100  # five lives of Breakout, not one life-loss episode
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["hyper_parameters"]["encoder"] == "nature"
