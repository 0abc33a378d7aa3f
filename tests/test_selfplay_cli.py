"""Self-play through ``rl-lightning fit`` as a user runs it (subprocess): the bundled game configs, bad seat maps."""

from __future__ import annotations

import pytest

from tests.cli_subprocess import ROOT, error_line, run_cli, snapshot

pytest.importorskip("pyspiel", reason='needs pip install -e ".[games]"')


def _tiny(tmp_path, num_envs, num_steps=16, updates=2):
    return [
        "--data.init_args.num_envs", str(num_envs), "--data.init_args.num_steps", str(num_steps),
        "--data.init_args.total_env_steps", str(num_envs * num_steps * updates), "--model.init_args.update_epochs", "1",
        "--model.init_args.num_minibatches", "2", "--model.init_args.hidden_sizes", "[32]",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip


@pytest.mark.parametrize(("config", "num_steps"), [("ppo_connect_four", 16), ("ppo_hearts", 40)])
def test_bundled_game_config_fits_as_a_subprocess(tmp_path, config, num_steps):
    # Hearts hands last about 60 decisions: 80 ticks per game so that hands finish and their points are logged.
    result = run_cli(["fit", "--config", f"{config}.yaml", *_tiny(tmp_path, 8, num_steps)], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run = next((tmp_path / "runs" / config).iterdir())
    assert (run / "checkpoints" / "last.ckpt").is_file()
    events = b"".join(path.read_bytes() for path in run.glob("events.out.tfevents.*"))
    assert b"rollout/episode_return" in events
    assert b"train/loss" in events
    assert b"eval/vs_random/" in events  # the config's GameEvaluation played its panel at the end of training
    if config == "ppo_hearts":
        assert b"rollout/points_per_hand" in events
        assert b"eval/vs_random/points_per_hand" in events


BAD_SEATS = [
    pytest.param(
        "{0: self, 4: random}", "data.seats names seat 4, but 'open_spiel:hearts' has seats 0..3", id="missing-seat"
    ),
    pytest.param("{1: my_pkg.bots:NoSuchBot}", "data.seats[1]='my_pkg.bots:NoSuchBot': cannot import", id="bad-bot"),
    pytest.param("{1: teammate}", "data.seats[1]='teammate' is not a seat kind", id="unknown-kind"),
]


@pytest.mark.parametrize(("seats", "expected"), BAD_SEATS)
def test_bad_seat_map_is_one_line_and_writes_nothing(tmp_path, seats, expected):
    (tmp_path / "notes.txt").write_text("a file the failed run must leave alone\n")
    before = snapshot(tmp_path)
    args = ["fit", "--config", "ppo_hearts.yaml", *_tiny(tmp_path, 4), "--data.init_args.seats", seats]
    line = error_line(run_cli(args, tmp_path))
    assert expected in line
    assert snapshot(tmp_path) == before


def test_users_own_pettingzoo_env_by_module_path_from_a_yaml_file(tmp_path):
    pytest.importorskip("pettingzoo")
    package = tmp_path / "my_games"  # the user's own package, outside this repository, importable from the cwd
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "parcel.py").write_text((ROOT / "tests" / "games_envs.py").read_text())
    config = tmp_path / "my_run.yaml"
    config.write_text(
        """
seed_everything: 3
model:
  class_path: rl_lightning.algos.PPO
  init_args: {hidden_sizes: [16], update_epochs: 1, num_minibatches: 2}
data:
  class_path: rl_lightning.data.OnPolicyDataModule
  init_args:
    env:
      class_path: rl_lightning.envs.PettingZooEnv
      init_args: {env_id: my_games.parcel}
    num_envs: 4
    num_steps: 16
    total_env_steps: 128
    seats: {2: random}
trainer:
  accelerator: cpu
  logger: {class_path: lightning.pytorch.loggers.TensorBoardLogger, init_args: {save_dir: runs, name: parcel}}
  enable_progress_bar: false
"""
    )
    result = run_cli(["fit", "--config", str(config)], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run = next((tmp_path / "runs" / "parcel").iterdir())
    assert list(run.glob("checkpoints/*.ckpt"))
    events = b"".join(path.read_bytes() for path in run.glob("events.out.tfevents.*"))
    assert b"rollout/episode_return" in events
    assert b"train/loss" in events
