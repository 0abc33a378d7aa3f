"""SPO on games through ``rl-lightning fit`` as a user runs it (subprocess): the bundled Connect Four config fits,
Hearts is refused in one line before anything is written."""

from __future__ import annotations

import pytest

from tests.cli_subprocess import error_line, run_cli, snapshot

pytest.importorskip("pyspiel", reason='needs pip install -e ".[games]"')


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


def test_spo_on_a_pettingzoo_game_is_one_line_and_writes_nothing(tmp_path):
    """PettingZoo games cannot snapshot: refused even where the user declares perfect information. The refusal comes
    at the datamodule's setup, after Lightning has opened the logger's event file (it does so before any setup hook),
    so that empty file is all the failed run leaves; no checkpoint, no config."""
    pytest.importorskip("pettingzoo")
    config = tmp_path / "spo_pz.yaml"
    config.write_text(
        f"""
model:
  class_path: rl_lightning.algos.SPO
  init_args: {{hidden_sizes: [16], num_particles: 4, search_depth: 2}}
data:
  class_path: rl_lightning.data.ReplayDataModule
  init_args:
    env:
      class_path: rl_lightning.envs.PettingZooEnv
      init_args: {{env_id: classic/connect_four-v3, perfect_information: true}}
    num_envs: 2
    rollout_length: 8
    sequence_length: 8
    total_env_steps: 64
trainer:
  accelerator: cpu
  logger:
    class_path: lightning.pytorch.loggers.TensorBoardLogger
    init_args: {{save_dir: {tmp_path / "runs"}, name: spo_pz}}
"""
    )
    before = snapshot(tmp_path)
    line = error_line(run_cli(["fit", "--config", str(config)], tmp_path))
    assert "data.env: SPO searches on env snapshots, and PettingZooEnv cannot snapshot" in line
    new = set(snapshot(tmp_path)) - set(before)
    assert all("events.out.tfevents" in path for path in new), new
