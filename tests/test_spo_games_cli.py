"""SPO on games through ``rl-lightning fit`` as a user runs it (subprocess): the bundled Connect Four config fits,
Hearts is refused in one line before anything is written."""

from __future__ import annotations

import pytest

from tests.cli_subprocess import error_line, run_cli, snapshot

pytest.importorskip("pyspiel", reason="needs pip install 'rl_lightning[games]'")


def _tiny(tmp_path, num_envs=4, rollout_length=8, updates=2):
    return [
        "--data.init_args.num_envs", str(num_envs), "--data.init_args.rollout_length", str(rollout_length),
        "--data.init_args.total_env_steps", str(num_envs * rollout_length * updates),
        "--data.init_args.buffer_size", "256", "--data.init_args.batch_size", "4",
        "--data.init_args.sequence_length", "8", "--data.init_args.gradient_steps", "2",
        "--model.init_args.num_particles", "4", "--model.init_args.search_depth", "2",
        "--model.init_args.resample_period", "2", "--model.init_args.hidden_sizes", "[32]",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip


def test_spo_connect_four_config_fits_as_a_subprocess(tmp_path):
    result = run_cli(["fit", "--config", "spo_connect_four.yaml", *_tiny(tmp_path)], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run = next((tmp_path / "runs" / "spo_connect_four").iterdir())
    assert (run / "checkpoints" / "last.ckpt").is_file()
    events = b"".join(path.read_bytes() for path in run.glob("events.out.tfevents.*"))
    for tag in (b"train/loss_critic", b"search/ess", b"rollout/episode_length", b"eval/vs_random/win_rate"):
        assert tag in events, tag


def test_spo_on_hearts_is_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "notes.txt").write_text("a file the failed run must leave alone\n")
    before = snapshot(tmp_path)
    args = ["fit", "--config", "spo_connect_four.yaml", *_tiny(tmp_path),
            "--data.init_args.env.init_args.env_id", "open_spiel:hearts"]  # fmt: skip
    line = error_line(run_cli(args, tmp_path))
    assert "'open_spiel:hearts' is an imperfect-information game" in line
    assert "hidden cards" in line
    assert "PPO self-play" in line
    assert snapshot(tmp_path) == before
