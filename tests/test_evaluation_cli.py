"""``rl-lightning validate``/``test`` (subprocesses, from a fit's checkpoint) play the env's evaluation form with the
``Evaluation`` callback's settings, and count episodes cut by ``max_steps`` instead of averaging them in."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests.cli_subprocess import ROOT, run_cli, run_python
from tests.eval_form_envs import EVAL_SCALE, TRAIN_LENGTH, TwoFormEnv

EVALUATION = "rl_lightning.callbacks.Evaluation"
SEED, EPISODES, MAX_STEPS = 7, 6, 20


def _evaluation(**init_args: Any) -> dict[str, Any]:
    return {"class_path": EVALUATION, "init_args": {"every_n_env_steps": 1_000_000, **init_args}}


def _config(path: Path, callbacks: list[dict[str, Any]], name: str = "two_form") -> str:
    """A tiny PPO config on ``TwoFormEnv`` (on top of the bundled ``ppo.yaml``) with ``callbacks``."""
    config = {
        "model": {"init_args": {"hidden_sizes": [8], "update_epochs": 1, "num_minibatches": 1}},
        "data": {"init_args": {"env": {"class_path": "tests.eval_form_envs.TwoFormEnv"}, "num_envs": 4,
                               "num_steps": 8, "total_env_steps": 32}},
        "trainer": {"enable_progress_bar": False, "callbacks": callbacks,
                    "logger": {"init_args": {"save_dir": "runs", "name": name}}},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _scalars(run_dir: Path) -> dict[str, float]:
    """The last value of every scalar a run wrote to TensorBoard."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"]}


def _expected(episodes: int, seed: int, max_steps: int) -> tuple[float, int]:
    """Mean length of the evaluation-form episodes that end within ``max_steps``, and how many are cut."""
    lengths = TwoFormEnv(evaluation=True).draw_lengths(episodes, torch.Generator().manual_seed(seed)).float()
    ended = lengths <= max_steps
    assert 0 < int(ended.sum()) < episodes  # the seed gives both kinds, so the test can tell them apart
    return float(lengths[ended].mean()), int((~ended).sum())


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(workdir, last.ckpt)`` of a one-update fit on ``TwoFormEnv``."""
    cwd = tmp_path_factory.mktemp("two_form")
    init_args = {"every_n_updates": 1, "save_last": True}
    checkpoint = {"class_path": "rl_lightning.callbacks.RLCheckpoint", "init_args": init_args}
    config = _config(cwd / "fit.yaml", [checkpoint])
    result = run_cli(["fit", "--config", "ppo", "--config", config], cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return cwd, cwd / "runs" / "two_form" / "version_0" / "checkpoints" / "last.ckpt"


@pytest.mark.parametrize("subcommand", ["validate", "test"])
def test_validate_and_test_play_the_evaluation_form_with_the_callbacks_settings(subcommand, fitted):
    cwd, ckpt = fitted
    prefix = "eval" if subcommand == "validate" else "test"
    name = f"deterministic_{subcommand}"
    evaluation = _evaluation(num_episodes=EPISODES, seed=SEED, deterministic=True, max_steps=MAX_STEPS)
    config = _config(cwd / f"{name}.yaml", [evaluation], name)
    result = run_cli([subcommand, "--config", "ppo", "--config", config, "--ckpt_path", str(ckpt)], cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    logged = _scalars(cwd / "runs" / name / "version_0")
    mean_length, cut = _expected(EPISODES, SEED, MAX_STEPS)
    assert logged[f"{prefix}/episode_length"] == pytest.approx(mean_length)  # evaluation form, not TRAIN_LENGTH
    assert mean_length != TRAIN_LENGTH
    assert logged[f"{prefix}/episodes_cut"] == cut
    per_step = logged[f"{prefix}/episode_return"] / logged[f"{prefix}/episode_length"]
    assert per_step in (pytest.approx(EVAL_SCALE), pytest.approx(2 * EVAL_SCALE))  # one action throughout: argmax


def test_sampling_setting_and_data_overrides_reach_test(fitted):
    cwd, ckpt = fitted
    evaluation = _evaluation(num_episodes=3, seed=1, deterministic=False, max_steps=MAX_STEPS)
    config = _config(cwd / "sampled.yaml", [evaluation], "sampled")
    overrides = ["--data.init_args.eval_episodes", "8", "--data.init_args.eval_seed", str(SEED)]
    result = run_cli(["test", "--config", "ppo", "--config", config, "--ckpt_path", str(ckpt), *overrides], cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    logged = _scalars(cwd / "runs" / "sampled" / "version_0")
    mean_length, cut = _expected(8, SEED, MAX_STEPS)
    assert logged["test/episode_length"] == pytest.approx(mean_length)
    assert logged["test/episodes_cut"] == cut
    per_step = logged["test/episode_return"] / logged["test/episode_length"]
    assert EVAL_SCALE < per_step < 2 * EVAL_SCALE  # both actions taken: sampled


def test_without_an_evaluation_callback_validate_uses_the_documented_defaults(fitted):
    cwd, ckpt = fitted
    config = _config(cwd / "bare.yaml", [], "bare")
    result = run_cli(["validate", "--config", "ppo", "--config", config, "--ckpt_path", str(ckpt)], cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    logged = _scalars(cwd / "runs" / "bare" / "version_0")
    lengths = TwoFormEnv(evaluation=True).draw_lengths(10, torch.Generator().manual_seed(12_345)).float()
    assert logged["eval/episode_length"] == pytest.approx(float(lengths.mean()))  # 10 episodes, seed 12,345
    assert logged["eval/episodes_cut"] == 0  # max_steps 27,000
    per_step = logged["eval/episode_return"] / logged["eval/episode_length"]
    assert per_step in (pytest.approx(EVAL_SCALE), pytest.approx(2 * EVAL_SCALE))  # PPO evaluates with the mode


#: Run in a fresh interpreter: the checkpoint's first evaluation episode, played in-process on the evaluation form
#: (``fresh()``) and on the training form of the preset's env, as validate plays it (seed, sampling, max_steps).
REPLAY_ATARI = """
import json, sys, torch
from rl_lightning.algos import PPO
from rl_lightning.envs import AleVectorEnv
from rl_lightning.evaluation.episodes import play_episodes
torch.set_num_threads(1)
module = PPO.load_from_checkpoint(sys.argv[1], map_location="cpu").eval()
train = AleVectorEnv("Breakout", atari_preset="baselines")
out = {}
for form, env in (("evaluation", train.fresh()), ("training", train)):
    played = play_episodes(module, env, 1, torch.device("cpu"), 12_345, deterministic=False, max_steps=27_000)
    out[form] = [float(played.returns[0]), float(played.lengths[0]), bool(played.finished[0])]
print(json.dumps(out))
"""


def test_validate_plays_whole_atari_games_of_the_bundled_preset(tmp_path):
    """``configs/ppo_atari.yaml`` (``AleVectorEnv``, baselines preset), tiny: validate scores a whole game, the same
    episode as the evaluation form played directly, not the training form's first life."""
    pytest.importorskip("ale_py")
    evaluation = _evaluation(num_episodes=1, deterministic=False, max_steps=27_000, seed=12_345)
    fragment = tmp_path / "tiny.yaml"
    fragment.write_text(yaml.safe_dump({
        "num_threads": 1,
        "model": {"init_args": {"update_epochs": 1, "num_minibatches": 1}},
        "data": {"init_args": {"num_envs": 2, "num_steps": 16, "total_env_steps": 32}},
        "trainer": {"enable_progress_bar": False, "callbacks+": [evaluation]},
    }))  # fmt: skip
    fit = run_cli(["fit", "--config", "ppo_atari", "--config", str(fragment)], tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    ckpt = tmp_path / "runs" / "ppo_atari" / "version_0" / "checkpoints" / "last.ckpt"
    validate = run_cli(
        ["validate", "--config", "ppo_atari", "--config", str(fragment), "--ckpt_path", str(ckpt)], tmp_path
    )
    assert validate.returncode == 0, validate.stderr[-3000:]
    logged = _scalars(tmp_path / "runs" / "ppo_atari" / "version_0" / "validate")  # beside the fit run it checks
    replay = run_python(["-c", REPLAY_ATARI, str(ckpt)])
    assert replay.returncode == 0, replay.stderr[-3000:]
    played = json.loads(replay.stdout.strip().splitlines()[-1])
    assert played["evaluation"][2]  # the game ended within max_steps
    assert logged["eval/episode_return"] == played["evaluation"][0]
    assert logged["eval/episode_length"] == played["evaluation"][1]
    assert logged["eval/episodes_cut"] == 0
    assert played["training"][1] < played["evaluation"][1]  # training form: the first life only
    # The inference guide's load_policy example on Atari, as written, on this run's checkpoint (the path it names)
    guide = ROOT / "docs" / "guides" / "inference-export.md"
    example = re.search(r"<!-- atari-inference-example -->\s*```python\n(.*?)```", guide.read_text(), re.S)
    assert example, "docs/guides/inference-export.md lost its Atari inference example"
    assert "runs/ppo_atari/version_0/checkpoints/last.ckpt" in example.group(1)
    done = run_python(["-c", example.group(1)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.fullmatch(r"score \d+\.\d, lives left 0", done.stdout.strip().splitlines()[-1])  # a whole game
