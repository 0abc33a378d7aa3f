"""Noise a user saw on every run, checked where they see it: TensorBoard's event files and a fit's output.

A stray ``hp_metric = -1`` scalar (``TensorBoardLogger``'s ``default_hp_metric`` placeholder), and MuJoCo's
``settotalmass`` deprecation printed once per HalfCheetah env built (8 times a fit), plus the ``MUJOCO_LOG.TXT``
MuJoCo's default warning handler leaves in the working directory.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from rl_lightning.lightning_cli import TRAINER_DEFAULTS
from tests.cli_subprocess import run_cli

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--data.init_args.num_steps", "32", "--data.init_args.total_env_steps", "64",
    "--model.init_args.update_epochs", "1", "--model.init_args.num_minibatches", "2",
    "--model.init_args.hidden_sizes", "[8]", "--trainer.enable_progress_bar", "false",
    "--trainer.logger.init_args.save_dir", "runs",
]  # fmt: skip


def test_tensorboard_events_hold_no_hp_metric_tag(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    done = run_cli(["fit", "--config", "ppo", "--data.init_args.num_envs", "2", *TINY], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (events,) = (tmp_path / "runs").rglob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events.parent))
    accumulator.Reload()
    tags = accumulator.Tags()
    assert "rollout/episode_return" in tags["scalars"]
    assert not [tag for kind in ("scalars", "tensors") for tag in tags[kind] if "hp_metric" in tag], tags


def test_every_tensorboard_logger_of_the_cli_writes_no_hp_metric_placeholder() -> None:
    """The CLI's default logger and every bundled config's TensorBoardLogger turn the placeholder off."""
    assert TRAINER_DEFAULTS["logger"]["init_args"]["default_hp_metric"] is False
    loggers = []
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        logger = (yaml.safe_load(path.read_text()) or {}).get("trainer", {}).get("logger")
        if isinstance(logger, dict) and logger.get("class_path", "").endswith("TensorBoardLogger"):
            loggers.append((path.name, logger.get("init_args", {}).get("default_hp_metric")))
    assert loggers
    assert [name for name, placeholder in loggers if placeholder is not False] == []


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="needs the mujoco extra")
def test_halfcheetah_fit_prints_no_settotalmass_deprecation(tmp_path: Path) -> None:
    args = ["fit", "--config", "ppo_halfcheetah", *TINY,
            "--trainer.callbacks+=rl_lightning.callbacks.Evaluation",
            "--trainer.callbacks.every_n_env_steps=64", "--trainer.callbacks.num_episodes=1"]  # fmt: skip
    done = run_cli(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "settotalmass" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
    assert list((tmp_path / "runs").rglob("last.ckpt"))


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="needs the mujoco extra")
def test_the_mujoco_filter_drops_one_message_and_restores_the_handler() -> None:
    import mujoco

    from rl_lightning.envs.gymnasium.mujoco_notices import SETTOTALMASS, quiet_gymnasium_mujoco_notices

    seen: list[str] = []

    def collect(message: str) -> None:
        seen.append(message)

    mujoco.set_mju_user_warning(collect)
    try:
        with quiet_gymnasium_mujoco_notices("HalfCheetah-v5"):
            handler = mujoco.get_mju_user_warning()
            handler(f"{SETTOTALMASS} and will be removed")
            handler("another MuJoCo warning")
        assert seen == ["another MuJoCo warning"]  # passed on to the handler that was installed
        assert mujoco.get_mju_user_warning() is collect
        with quiet_gymnasium_mujoco_notices("CartPole-v1"):  # not a MuJoCo env: nothing installed
            assert mujoco.get_mju_user_warning() is collect
    finally:
        mujoco.set_mju_user_warning(None)
