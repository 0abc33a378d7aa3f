"""Gymnasium envs named in a YAML config, run through the ``rl-lightning`` CLI in a subprocess as a user runs it.

Custom env ids (``package.module:EnvId``) and their one-line errors.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.cli_subprocess import run_python

#: Two tiny PPO updates on 4 envs (the bundled ppo.yaml runs 50k steps).
TINY_PPO = {
    "data": {"init_args": {"num_envs": 4, "num_steps": 8, "total_env_steps": 64}},
    "model": {"init_args": {"update_epochs": 1, "num_minibatches": 2, "hidden_sizes": [8]}},
    "trainer": {"enable_progress_bar": False},
}


def run_cli(
    tmp_path: Path, env: dict, *extra: str, base: str = "ppo.yaml", tiny: dict = TINY_PPO, pythonpath: tuple = ()
) -> subprocess.CompletedProcess:
    """``rl-lightning fit --config <base> --config <tmp yaml>`` with ``data.init_args.env = env``, in ``tmp_path``."""
    config = {**tiny, "data": {"init_args": {**tiny["data"]["init_args"], "env": env}}}
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(config))
    args = ["fit", "--config", base, "--config", str(path), "--trainer.logger.init_args.save_dir", "runs"]
    return run_python(["-m", "rl_lightning.cli", *args, *extra], tmp_path, extra_path=pythonpath)


def assert_one_line_error(done: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit code != 0, no traceback, and one ``rl-lightning: error:`` line holding every fragment."""
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("rl-lightning: error:")]
    assert len(lines) == 1, done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def gym_env(env_id: str | None, backend: str = "GymnasiumEnv", **init_args: object) -> dict:
    args = {"env_id": env_id, **init_args} if env_id is not None else init_args
    return {"class_path": f"rl_lightning.envs.{backend}", "init_args": args}


def test_module_colon_id_trains_from_yaml(tmp_path: Path) -> None:
    done = run_cli(tmp_path, gym_env("tests.my_envs:MyEnv-v0"))
    assert done.returncode == 0, done.stderr[-3000:]
    saved = yaml.safe_load(next((tmp_path / "runs").rglob("config.yaml")).read_text())
    assert saved["data"]["init_args"]["env"]["init_args"]["env_id"] == "tests.my_envs:MyEnv-v0"
    assert list((tmp_path / "runs").rglob("last.ckpt"))


def test_module_that_does_not_import_is_one_line(tmp_path: Path) -> None:
    done = run_cli(tmp_path, gym_env("tests.no_such_module:MyEnv-v0"))
    assert_one_line_error(done, "tests.no_such_module", "does not import")
    assert not (tmp_path / "runs").exists()


def test_unregistered_id_lists_close_matches(tmp_path: Path) -> None:
    done = run_cli(tmp_path, gym_env("tests.my_envs:MyEnv-v1"))
    assert_one_line_error(done, "'MyEnv-v1'", "did you mean 'MyEnv-v0'")
    assert not (tmp_path / "runs").exists()


def test_spo_refuses_a_backend_without_snapshots(tmp_path: Path) -> None:
    tiny = {"data": {"init_args": {"num_envs": 2}}, "trainer": {"enable_progress_bar": False}}
    env = gym_env("CartPole-v1", "GymnasiumVectorEnv", mode="sync")
    done = run_cli(tmp_path, env, base="spo.yaml", tiny=tiny)
    assert_one_line_error(done, "GymnasiumVectorEnv", "SPO", "rl_lightning.envs.GymnasiumEnv (in-process)")
    assert not list(tmp_path.rglob("*.ckpt"))


def logged(tmp_path: Path, tag: str) -> list[float]:
    """Values of ``tag`` as TensorBoard's own loader reads them from the run's event files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = (tmp_path / "runs").rglob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events.parent))
    accumulator.Reload()
    return [event.value for event in accumulator.Scalars(tag)]


def test_env_class_with_wrappers_on_the_async_backend_from_yaml(tmp_path: Path) -> None:
    env = gym_env(
        None,
        "GymnasiumVectorEnv",
        mode="async",
        env_class={"class_path": "tests.my_envs.GoalCorridor", "init_args": {"length": 30, "step_cost": 0.5}},
        wrappers=[
            {"class_path": "gymnasium.wrappers.FilterObservation", "init_args": {"filter_keys": ["position"]}},
            {"class_path": "gymnasium.wrappers.FlattenObservation"},
            {"class_path": "tests.my_envs.ScaleObservation", "init_args": {"scale": 2.0}},
            {"class_path": "gymnasium.wrappers.TimeLimit", "init_args": {"max_episode_steps": 3}},
        ],
    )
    done = run_cli(tmp_path, env)
    assert done.returncode == 0, done.stderr[-3000:]
    lengths, returns = logged(tmp_path, "rollout/episode_length"), logged(tmp_path, "rollout/episode_return")
    assert lengths == [3.0, 3.0]  # a 30-cell corridor is never walked in 3 steps: every episode is truncated
    assert returns == [-1.5, -1.5]


def test_entry_point_of_an_installed_package_names_an_env(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist = site / "corridor_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: corridor-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[gymnasium.envs]\ncorridor = tests.my_envs:register_plugin_envs\n")
    done = run_cli(tmp_path, gym_env("PluginCorridor-v0"), pythonpath=(site,))
    assert done.returncode == 0, done.stderr[-3000:]
    assert max(logged(tmp_path, "rollout/episode_length")) <= 12  # the plugin registered max_episode_steps=12


def test_checkpoint_files_are_named_by_env_steps_from_the_cli(tmp_path):
    """The CLI hands RLCheckpoint ``filename: null``; the file is still named on the RL clock, not ``step=``."""
    done = run_cli(tmp_path, {"class_path": "rl_lightning.envs.CartPole"})
    assert done.returncode == 0, done.stderr[-2000:]
    (checkpoints,) = (tmp_path / "runs").glob("*/version_0/checkpoints")
    assert sorted(p.name for p in checkpoints.iterdir()) == ["env_steps=64.ckpt", "last.ckpt"]
