"""Each algorithm fits on MuJoCo and on ALE through the CLI, as a user runs it (issue 20, "close the class").

One subprocess ``rl-lightning fit`` per (algorithm, env family), on a backend the algorithm supports there: PPO on
EnvPool (MuJoCo) and ``AleVectorEnv`` (ALE); SPO on the in-process backend, the one whose states its search copies;
DreamerV3 on Gymnasium's sync vector env (MuJoCo) and ``AleVectorEnv`` (ALE). Tiny networks and budgets: the point is
that every piece (spaces, pixels, snapshots, the replay stream, checkpoints, TensorBoard) meets a real simulator.
The six runs go one at a time, each forked from the CLI fork server; each must exit 0, report its updates in the
checkpoint and log finite training losses against env steps.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
import torch

from rl_lightning.algos.base import COUNTERS_KEY
from tests.cli_subprocess import ROOT, run_cli

pytest.importorskip("mujoco")
pytest.importorskip("ale_py")
pytest.importorskip("envpool")

CALLBACKS = ROOT / "tests" / "matrix_callbacks.yaml"  # checkpoints only: evaluation is not what this test is about
MUJOCO = "{env_id: Hopper-v5, env_kwargs: {max_episode_steps: 30}}"
TINY = {
    "ppo": ["--model.init_args.update_epochs", "1", "--model.init_args.num_minibatches", "2",
            "--model.init_args.hidden_sizes", "[16]"],
    "spo": ["--data.init_args.rollout_length", "8", "--data.init_args.gradient_steps", "1",
            "--data.init_args.batch_size", "4", "--data.init_args.sequence_length", "4",
            "--model.init_args.num_particles", "2", "--model.init_args.search_depth", "2",
            "--model.init_args.resample_period", "2", "--model.init_args.hidden_sizes", "[16]"],
    "dreamer": ["--data.init_args.rollout_length", "4", "--data.init_args.batch_size", "2",
                "--data.init_args.sequence_length", "4", "--data.init_args.commit_stride", "2",
                "--data.init_args.buffer_size", "256", "--model.init_args.horizon", "2",
                "--model.init_args.size", "XS"],
}
RUNS = {  # (algorithm, family) -> config and the overrides that put it on its backend at a tiny budget
    ("ppo", "mujoco"): ["ppo_halfcheetah", "--data.init_args.env", "rl_lightning.envs.EnvPoolEnv",
                        "--data.init_args.env.init_args", MUJOCO, "--data.init_args.num_envs", "2",
                        "--data.init_args.num_steps", "16", "--data.init_args.total_env_steps", "64"],
    ("ppo", "ale"): ["ppo_atari", "--data.init_args.num_envs", "2", "--data.init_args.num_steps", "8",
                     "--data.init_args.total_env_steps", "32", "--num_threads", "1"],
    ("spo", "mujoco"): ["spo_halfcheetah", "--data.init_args.env.init_args", MUJOCO,
                        "--data.init_args.num_envs", "2", "--data.init_args.total_env_steps", "32"],
    ("spo", "ale"): ["spo", "--data.init_args.env", "rl_lightning.envs.GymnasiumEnv",
                     "--data.init_args.env.init_args", "{env_id: Breakout, atari_preset: baselines}",
                     "--model.init_args.encoder", "nature", "--data.init_args.num_envs", "1",
                     "--data.init_args.total_env_steps", "16"],
    ("dreamer", "mujoco"): ["dreamer_pendulum", "--data.init_args.env", "rl_lightning.envs.GymnasiumVectorEnv",
                            "--data.init_args.env.init_args", MUJOCO, "--data.init_args.num_envs", "2",
                            "--data.init_args.total_env_steps", "24", "--data.init_args.learning_starts", "9",
                            "--data.init_args.replay_ratio", "0.125"],
    ("dreamer", "ale"): ["dreamer_atari", "--data.init_args.env", "rl_lightning.envs.AleVectorEnv",
                         "--data.init_args.env.init_args", "{env_id: Breakout, atari_preset: machado}",
                         "--data.init_args.num_envs", "2", "--data.init_args.total_env_steps", "24",
                         "--data.init_args.learning_starts", "9", "--data.init_args.replay_ratio", "0.125",
                         "--num_threads", "1", "--trainer.accelerator", "cpu"],
}


def _fit(key: tuple[str, str], out: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    algo, family = key
    config, *overrides = RUNS[key]
    run_dir = out / f"{algo}_{family}"
    run_dir.mkdir()
    args = ["fit", "--config", config, *overrides, *TINY[algo], "--trainer.enable_progress_bar", "false",
            "--trainer.logger.init_args.save_dir", str(run_dir), "--trainer.default_root_dir", str(run_dir),
            "--config", str(CALLBACKS)]  # fmt: skip
    return run_cli(args, run_dir, timeout=600), run_dir


@pytest.fixture(scope="module")
def fits(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[subprocess.CompletedProcess, Path]]:
    out = tmp_path_factory.mktemp("matrix_fits")
    return {key: _fit(key, out) for key in RUNS}


def _scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = sorted(run_dir.rglob("events.out.tfevents.*"))
    assert events, f"no TensorBoard events under {run_dir}"
    acc = EventAccumulator(str(events[-1].parent), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.parametrize("key", list(RUNS), ids=lambda k: f"{k[0]}-{k[1]}")
def test_fit_on_real_env(fits, key: tuple[str, str]) -> None:
    result, run_dir = fits[key]
    assert result.returncode == 0, result.stderr[-3000:]
    ckpts = sorted(run_dir.rglob("*.ckpt"))
    assert ckpts, f"no checkpoint under {run_dir}: {result.stderr[-2000:]}"
    state = torch.load(ckpts[-1], map_location="cpu", weights_only=False)
    assert state[COUNTERS_KEY]["updates"] >= 2
    scalars = _scalars(run_dir)
    losses = [tag for tag in scalars if tag.startswith("train/loss")]
    assert losses, sorted(scalars)
    for tag in losses:
        assert all(math.isfinite(v) for _, v in scalars[tag]), tag
