"""``--ckpt_path`` as a user meets it (subprocess CLI): the config wins, bad checkpoints fail in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tests.cli_subprocess import error_line, run_cli, snapshot

# 8 envs × 16 steps = 128 env steps per update: two updates
TINY = ["--data.init_args.num_steps", "16", "--model.init_args.update_epochs", "1", "--trainer.enable_progress_bar",
        "false", "--data.init_args.eval_episodes", "2"]  # fmt: skip
SUBCOMMANDS = ["fit", "validate", "test"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A finished two-update PPO CartPole run (``runs/ppo_cartpole/version_0``) made by the CLI."""
    cwd = tmp_path_factory.mktemp("ppo_run")
    result = run_cli(["fit", "--config", "ppo", "--data.init_args.total_env_steps", "256", *TINY], cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return cwd


@pytest.fixture
def ckpt(run_dir) -> Path:
    return run_dir / "runs" / "ppo_cartpole" / "version_0" / "checkpoints" / "last.ckpt"


def _refused(args: list[str], cwd: Path, run_dir: Path) -> str:
    """Run a call that must fail; check that it changed no file, and return its error line."""
    before = snapshot(run_dir, cwd)
    line = error_line(run_cli(args, cwd))
    assert snapshot(run_dir, cwd) == before
    return line


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_checkpoint_of_another_algorithm_is_refused(subcommand, ckpt, run_dir, tmp_path):
    line = _refused([subcommand, "--config", "spo", "--ckpt_path", str(ckpt), *TINY[4:]], tmp_path, run_dir)
    assert str(ckpt) in line
    assert "family 'ppo'" in line
    assert "'spo'" in line


@pytest.mark.parametrize("subcommand", ["fit", "test"])
def test_checkpoint_of_another_env_shape_is_refused(subcommand, ckpt, run_dir, tmp_path):
    line = _refused([subcommand, "--config", "ppo_pendulum", "--ckpt_path", str(ckpt), *TINY[4:]], tmp_path, run_dir)
    assert "'CartPole' (obs (4,)" in line
    assert "'Pendulum' (obs (3,)" in line


def test_checkpoint_whose_weights_do_not_fit_the_configured_networks_is_refused(ckpt, run_dir, tmp_path):
    args = ["validate", "--config", "ppo", "--ckpt_path", str(ckpt), "--model.init_args.hidden_sizes", "[32]"]
    line = _refused([*args, *TINY[4:]], tmp_path, run_dir)
    assert "(64, 4) there but (32, 4) in the model" in line
    assert "hidden_sizes" in line


def _damaged(kind: str, ckpt: Path, tmp_path: Path) -> Path:
    path = tmp_path / f"{kind}.ckpt"
    if kind == "truncated":
        data = ckpt.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "random":
        path.write_bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0)).byte().numpy())
    return path  # "missing": never written


@pytest.mark.parametrize(
    ("kind", "subcommand"),
    [("missing", "fit"), ("missing", "validate"), ("missing", "test"), ("truncated", "validate"), ("random", "fit")],
)  # fmt: skip
def test_unreadable_checkpoint_is_refused(kind, subcommand, ckpt, run_dir, tmp_path):
    path = _damaged(kind, ckpt, tmp_path)
    line = _refused([subcommand, "--config", "ppo", "--ckpt_path", str(path), *TINY[4:]], tmp_path, run_dir)
    assert str(path) in line
    assert ("no such file" if kind == "missing" else "cannot be read as a checkpoint") in line


@pytest.mark.parametrize("subcommand", ["validate", "test"])
def test_evaluation_without_a_checkpoint_is_refused(subcommand, run_dir, tmp_path):
    line = _refused([subcommand, "--config", "ppo", *TINY[4:]], tmp_path, run_dir)
    assert "--ckpt_path" in line


def test_validate_with_ckpt_path_last_and_no_earlier_run_is_refused(run_dir, tmp_path):
    line = _refused(["validate", "--config", "ppo", "--ckpt_path", "last", *TINY[4:]], tmp_path, run_dir)
    assert "ckpt_path=last" in line
    assert "runs/ppo_cartpole" in line


@pytest.mark.parametrize("subcommand", ["validate", "test"])
def test_validate_and_test_load_ckpt_path_last(subcommand, run_dir, tmp_path):
    shutil.copytree(run_dir / "runs", tmp_path / "runs")
    result = run_cli([subcommand, "--config", "ppo", "--ckpt_path", "last", *TINY[4:]], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    restored = [line for line in (result.stdout + result.stderr).splitlines() if "Restoring states from" in line]
    assert restored
    assert restored[0].endswith("runs/ppo_cartpole/version_0/checkpoints/last.ckpt")
    assert f"{'eval' if subcommand == 'validate' else 'test'}/episode_return" in result.stdout


def test_config_and_overrides_win_over_the_checkpoint(ckpt, tmp_path):
    """Resuming with a changed setting trains with it (LightningCLI used to load the checkpoint's over it)."""
    saved = torch.load(ckpt, weights_only=False)["hyper_parameters"]
    assert saved["ent_coef"] != 0.25  # the override below must differ from what the checkpoint holds
    args = ["fit", "--config", "ppo", "--ckpt_path", str(ckpt), "--data.init_args.total_env_steps", "384", *TINY,
            "--model.init_args.ent_coef", "0.25"]  # fmt: skip
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "JsonargparseWarning" not in result.stderr
    resumed = torch.load(tmp_path / "runs" / "ppo_cartpole" / "version_0" / "checkpoints" / "last.ckpt",
                         weights_only=False)  # fmt: skip
    assert resumed["hyper_parameters"]["ent_coef"] == 0.25
    assert resumed["rl_counters"]["updates"] == 3  # continued from the checkpoint's 2 updates
    assert resumed["policy_revision"]["parent"] == 2
