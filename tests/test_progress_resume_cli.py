"""The progress bar and warnings of an async run, resumed, validated and tested, as a user sees them (subprocesses).

A resumed async run drew one frame at fewer env steps than the bar's start (``-3424365817.08 env steps/s``),
Lightning's epoch-start reset relabelled the bar "Epoch N" between "Training" frames, every resume warned that the
checkpoint folder had changed, and ``validate``/``test`` drew a ``1/1`` bar for their single evaluation.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli_subprocess import run_cli

ROLLOUT = 4 * 16


def _fit(tmp_path: Path, total_env_steps: int, *extra: str) -> list[str]:
    return [
        "fit", "--config", "ppo",
        "--data.init_args.num_envs", "4", "--data.init_args.num_steps", "16",
        "--data.init_args.total_env_steps", str(total_env_steps), "--data.init_args.num_actors", "1",
        "--model.init_args.update_epochs", "1", "--model.init_args.num_minibatches", "2",
        "--model.init_args.hidden_sizes", "[16]", "--trainer.logger.init_args.save_dir", "runs",
        *extra,
    ]  # fmt: skip


def _frames(output: str) -> list[str]:
    """Every frame tqdm drew (frames are separated by carriage returns)."""
    return [frame.strip() for frame in re.split(r"[\r\n]", output) if frame.strip()]


def _bar(stdout: str) -> list[str]:
    """The env-step bar's frames."""
    return [frame for frame in _frames(stdout) if "env steps/s" in frame]


def test_resumed_async_run_shows_no_negative_rate_and_no_dirpath_warning(tmp_path: Path) -> None:
    """Fit, then ``--ckpt_path last``: no dirpath warning, no negative rate, the bar labelled "Training" throughout."""
    first = run_cli(_fit(tmp_path, 2 * ROLLOUT), tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = run_cli(_fit(tmp_path, 4 * ROLLOUT, "--ckpt_path", "last"), tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "dirpath has changed" not in resumed.stderr, resumed.stderr[-3000:]
    bars = {"first": _bar(first.stdout), "resumed": _bar(resumed.stdout)}
    for frames in bars.values():
        assert frames
        assert not [frame for frame in frames if re.search(r"-\d|<-", frame)], frames  # no negative rate or ETA
    for run in (first, resumed):
        assert all(frame.startswith("Training:") for frame in _bar(run.stdout)), _bar(run.stdout)  # no "Epoch N"
        assert not re.search(r"^\s*Epoch \d", run.stdout, re.M), run.stdout[-3000:]
        assert "it/s" not in run.stdout  # Lightning's batch-counting bar never flashes before ours
    assert re.search(rf"\| {2 * ROLLOUT}/{4 * ROLLOUT} ", bars["resumed"][0]), bars["resumed"][0]  # where it stopped
    assert sorted(path.name for path in (tmp_path / "runs" / "ppo_cartpole").iterdir()) == ["version_0", "version_1"]


def test_validate_and_test_draw_no_one_batch_bar(tmp_path: Path) -> None:
    fit = run_cli(_fit(tmp_path, ROLLOUT, "--trainer.enable_progress_bar", "false"), tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    for subcommand, table in (("validate", "Validate metric"), ("test", "Test metric")):
        args = [subcommand, "--config", "ppo", "--model.init_args.hidden_sizes", "[16]",
                "--trainer.logger.init_args.save_dir", "runs", "--ckpt_path", "last"]  # fmt: skip
        done = run_cli(args, tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        output = done.stdout + done.stderr
        assert table in output, output[-3000:]
        assert not re.search(r"\b[01]/1\b|/\?|DataLoader 0:|it/s", output), output[-3000:]
