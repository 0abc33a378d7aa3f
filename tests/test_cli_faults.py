"""``rl-lightning fit`` as a user runs it (a subprocess): a failing env, NaN rewards, SIGTERM and Ctrl+C."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import torch

from tests.cli_process import CliRun

ROOT = Path(__file__).resolve().parents[1]
ROLLOUT = 4 * 16  # num_envs × num_steps below


def _args(tmp_path: Path, total_env_steps: int, env: dict | None = None) -> list[str]:
    args = [
        "fit", "--config", "ppo",
        "--data.init_args.num_envs", "4", "--data.init_args.num_steps", "16",
        "--data.init_args.total_env_steps", str(total_env_steps),
        "--model.init_args.update_epochs", "1", "--model.init_args.num_minibatches", "2",
        "--model.init_args.hidden_sizes", "[16]",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip
    if env is not None:
        args += ["--data.init_args.env", json.dumps(env)]
    return args


def _faulty(**init_args: object) -> dict:
    return {"class_path": "tests.fault_envs.FaultyGym", "init_args": init_args}


def _popen(tmp_path: Path, args: list[str]) -> CliRun:
    return CliRun(args, tmp_path)


def _run(tmp_path: Path, args: list[str]) -> tuple[int, str]:
    proc = _popen(tmp_path, args)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def _error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("rl-lightning: error:")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return lines[0]


def _saved(line: str) -> tuple[int, dict]:
    """The update number and the contents of the checkpoint the error line says was saved."""
    match = re.search(r"checkpoint of update (\d+) saved to (\S+); continue with --ckpt_path last", line)
    assert match, line
    return int(match[1]), torch.load(match[2], map_location="cpu", weights_only=False)


def _finished(tmp_path: Path, version: int) -> dict:
    path = tmp_path / "runs" / "ppo_cartpole" / f"version_{version}" / "checkpoints" / "last.ckpt"
    return torch.load(path, map_location="cpu", weights_only=False)


def _env_steps(checkpoint: dict) -> int:
    return checkpoint["OnPolicyDataModule"]["local_env_steps"]


def test_env_that_raises_leaves_a_checkpoint_and_resume_finishes_the_budget(tmp_path):
    budget = 6 * ROLLOUT
    # env index 2 raises on its 40th step: in the 3rd rollout (steps 33..48 of each env), after 2 updates
    code, err = _run(tmp_path, _args(tmp_path, budget, _faulty(fail_step=40, fail_nth=3)))
    line = _error_line(err)
    assert code == 2
    assert "env 'RLTest/Counting-v0' (index 2 of 4) raised RuntimeError in step(): simulator crashed at step 40" in line
    updates, checkpoint = _saved(line)
    assert updates == checkpoint["rl_counters"]["updates"] == 2
    assert _env_steps(checkpoint) == 2 * ROLLOUT  # the half-collected 3rd rollout is not counted

    code, err = _run(tmp_path, [*_args(tmp_path, budget, _faulty()), "--ckpt_path", "last"])
    assert code == 0, err
    resumed = _finished(tmp_path, 1)
    assert resumed["rl_counters"]["updates"] == budget // ROLLOUT  # what an uninterrupted run does
    assert resumed["rl_counters"]["parent_version"] == 2
    assert _env_steps(resumed) == budget


def test_nan_reward_fails_with_one_line_naming_env_and_index(tmp_path):
    code, err = _run(tmp_path, _args(tmp_path, 6 * ROLLOUT, _faulty(nan_step=37, nan_nth=2)))
    line = _error_line(err)
    assert code == 2
    assert "env 'RLTest/Counting-v0' (index 1 of 4) returned a non-finite 'reward' (NaN or inf)" in line
    updates, checkpoint = _saved(line)
    assert updates == checkpoint["rl_counters"]["updates"] == 2


def _stop_after_updates(tmp_path: Path, signum: int) -> tuple[int, str]:
    marker = tmp_path / "marker"
    fragment = tmp_path / "mark.yaml"
    fragment.write_text(
        "trainer:\n  callbacks+:\n    - class_path: tests.fault_envs.MarkAfterUpdates\n"
        f"      init_args: {{path: {marker}, updates: 3, sleep_s: 0.2}}\n"
    )
    proc = _popen(tmp_path, [*_args(tmp_path, 1000 * ROLLOUT), "--config", str(fragment)])
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), proc.communicate()[1] if proc.poll() is not None else "no marker within 120 s"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def test_sigterm_saves_the_finished_update_and_resume_continues(tmp_path):
    code, err = _stop_after_updates(tmp_path, signal.SIGTERM)
    line = _error_line(err)
    assert code == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in line
    updates, checkpoint = _saved(line)
    assert updates == checkpoint["rl_counters"]["updates"] >= 3
    assert _env_steps(checkpoint) == updates * ROLLOUT

    code, err = _run(tmp_path, [*_args(tmp_path, (updates + 2) * ROLLOUT), "--ckpt_path", "last"])
    assert code == 0, err
    resumed = _finished(tmp_path, 1)
    assert resumed["rl_counters"]["updates"] == updates + 2
    assert resumed["rl_counters"]["parent_version"] == updates
    assert _env_steps(resumed) == (updates + 2) * ROLLOUT


def test_ctrl_c_stops_at_the_end_of_the_update_and_saves_it(tmp_path):
    code, err = _stop_after_updates(tmp_path, signal.SIGINT)
    line = _error_line(err)
    assert code == 128 + signal.SIGINT
    assert "stopped by SIGINT" in line
    updates, checkpoint = _saved(line)
    assert updates == checkpoint["rl_counters"]["updates"] >= 3
    assert _env_steps(checkpoint) == updates * ROLLOUT
