"""In-process CLI runs of every bundled config and callback fragment, and the bad-input errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from rl_lightning.cli import bundled_dirs, cli_main, main
from tests.bundled_configs import bundled_configs

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = bundled_configs()
FRAGMENTS = sorted((ROOT / "callbacks").glob("*.yaml"))
#: The fragments a single-agent config takes (GameEvaluation refuses a one-seat env; tests/test_games_cli.py runs
#: callbacks/game_eval.yaml on games and checks that refusal).
SINGLE_AGENT_FRAGMENTS = [path for path in FRAGMENTS if "GameEvaluation" not in path.read_text()]


def _common_overrides(tmp_path: Path) -> list[str]:
    # One thread: the Atari configs' num_threads 2 beside a second xdist worker oversubscribes a 2-core machine.
    return ["--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
            "--num_threads", "1"]  # fmt: skip


def _fast_overrides(tmp_path: Path, config: Path, few_envs: bool = False) -> list[str]:
    """Two tiny updates of any bundled config (PPO: rollouts of 16 steps; SPO: also tiny search and batches);
    ``few_envs``: at most 2 envs (fewer Atari emulators and CNN rows to build)."""
    loaded = yaml.safe_load(config.read_text())
    if loaded["model"]["class_path"].endswith(".BC"):  # behaviour cloning: 2 games recorded at start-up, 2 steps
        return ["--data.init_args.path", str(tmp_path / "records"), "--data.init_args.record_games", "2",
                "--data.init_args.batch_size", "32", "--trainer.max_epochs", "1", "--model.init_args.hidden_sizes",
                "[16]", *_common_overrides(tmp_path)]  # fmt: skip
    num_envs = loaded["data"]["init_args"]["num_envs"]
    num_envs = min(num_envs, 2) if few_envs else num_envs
    if loaded["model"]["class_path"].endswith("DreamerV3"):
        train = {
            "data.init_args.rollout_length": 4,
            "data.init_args.total_env_steps": num_envs * 4 * 3,
            "data.init_args.learning_starts": num_envs * 4 + 1,
            "data.init_args.replay_ratio": 1 / (num_envs * 4),
            "data.init_args.batch_size": 2,
            "data.init_args.sequence_length": 4,
            "data.init_args.commit_stride": 2,
            "data.init_args.buffer_size": 256,
            "model.init_args.horizon": 2,
            "model.init_args.size": "tiny",  # the wiring is the test; size S's CNN on 64x64 frames cost a minute
        }
    elif loaded["model"]["class_path"].endswith("SPO"):
        train = {
            "data.init_args.rollout_length": 16,
            "data.init_args.total_env_steps": num_envs * 16 * 2,
            "data.init_args.gradient_steps": 1,
            "data.init_args.batch_size": 4,
            "data.init_args.sequence_length": 8,
            "model.init_args.num_particles": 4,
            "model.init_args.hidden_sizes": "[16]",
        }
    else:
        train = {
            "data.init_args.num_steps": 16,
            "data.init_args.total_env_steps": num_envs * 16 * 2,
            "model.init_args.update_epochs": 1,
            "model.init_args.num_minibatches": 2,
        }
    train["data.init_args.num_envs"] = num_envs
    if loaded["data"]["init_args"]["env"]["class_path"].startswith("rl_lightning.envs.Gymnasium"):
        train["data.init_args.env.init_args.env_kwargs"] = "{max_episode_steps: 20}"  # short evaluation episodes
    args = [item for key, value in train.items() for item in (f"--{key}", str(value))]
    return args + _short_evaluation(tmp_path, config, loaded) + _common_overrides(tmp_path)


def _short_evaluation(tmp_path: Path, config: Path, loaded: dict) -> list[str]:
    """The config's callbacks with 2 evaluation episodes cut at 50 steps (8 games for a game panel): backends without
    ``env_kwargs`` (``AleVectorEnv``) would otherwise play whole untrained Atari games (27,000 steps each) at the end
    of the fit, and the Hearts panel 800 hands."""
    callbacks = loaded.get("trainer", {}).get("callbacks") or []
    if not any(cb["class_path"].endswith("Evaluation") for cb in callbacks):
        return []

    def shortened(cb: dict) -> dict:
        game = cb["class_path"].endswith(".GameEvaluation")
        # exploitability off: tic-tac-toe's would enumerate 294,778 histories (tests/test_exploitability.py fits it),
        # so a panel left empty for it plays random instead
        short = {"num_games": 8, "exploitability": False} if game else {"max_steps": 50, "num_episodes": 2}
        if game and (cb.get("init_args") or {}).get("opponents") == []:
            short["opponents"] = ["random"]
        return {**cb, "init_args": {**(cb.get("init_args") or {}), **short}}

    short = [shortened(cb) if cb["class_path"].endswith("Evaluation") else cb for cb in callbacks]
    fragment = tmp_path / f"{config.stem}_short_eval.yaml"
    fragment.write_text(yaml.safe_dump({"trainer": {"callbacks": short}}))
    return ["--config", str(fragment)]


@pytest.mark.parametrize("config", CONFIGS)
def test_every_config_fits_by_name_from_another_directory(tmp_path, monkeypatch, config):
    monkeypatch.chdir(tmp_path)  # bundled configs resolve by bare name from any directory
    cli = cli_main(["fit", "--config", config.stem, *_fast_overrides(tmp_path, config, few_envs=True)])
    assert cli.model.updates == 2
    log_dir = Path(cli.trainer.log_dir)
    assert (log_dir / "config.yaml").is_file()  # SaveConfigCallback
    assert list(log_dir.glob("events.out.tfevents.*"))  # TensorBoard
    assert (log_dir / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.parametrize("fragment", SINGLE_AGENT_FRAGMENTS, ids=lambda p: p.name)
def test_every_callback_fragment_runs_with_one_callback_per_class(tmp_path, monkeypatch, fragment):
    monkeypatch.chdir(tmp_path)
    config = ROOT / "configs" / "ppo.yaml"
    # The fragment goes last: the short-evaluation config in the overrides replaces the callback list.
    cli = cli_main(
        ["fit", "--config", "ppo.yaml", *_fast_overrides(tmp_path, config), "--config", f"callbacks/{fragment.name}"]
    )
    names = [type(cb).__name__ for cb in cli.trainer.callbacks]
    for name in ("Evaluation", "FailFast", "RLCheckpoint"):
        assert names.count(name) == 1
    assert names.count("EarlyStopping") == (fragment.stem == "early_stopping")
    assert (Path(cli.trainer.log_dir) / "checkpoints" / "last.ckpt").is_file()  # resume still has its file


def test_validate_and_test_play_evaluation_episodes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = ROOT / "configs" / "ppo.yaml"
    cli = cli_main(["fit", "--config", "ppo", *_fast_overrides(tmp_path, config)])
    ckpt = Path(cli.trainer.log_dir) / "checkpoints" / "last.ckpt"
    for command, key in (("validate", "eval/episode_return"), ("test", "test/episode_return")):
        cli = cli_main(
            [
                command,
                "--config",
                "ppo",
                "--ckpt_path",
                str(ckpt),
                *_common_overrides(tmp_path),
                "--data.init_args.eval_episodes",
                "3",
            ]
        )
        assert key in cli.trainer.callback_metrics


def test_resume_with_ckpt_path_last_continues_counters(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = ROOT / "configs" / "ppo.yaml"
    args = _fast_overrides(tmp_path, config)
    first = cli_main(["fit", "--config", "ppo", *args])
    assert first.model.updates == 2
    args[args.index("--data.init_args.total_env_steps") + 1] = str(8 * 16 * 4)
    second = cli_main(["fit", "--config", "ppo", *args, "--ckpt_path", "last"])
    assert second.model.updates == 4
    assert second.datamodule.env_steps == 8 * 16 * 4
    assert second.model.parent_version == 2


def _run_main(args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code != 0
    return capsys.readouterr().err


BAD_INPUTS = [
    (["--model.init_args.clip_coeff", "0.1"], "clip_coeff"),  # mistyped key
    (["--data.init_args.num_envs", "0"], "num_envs"),
    (["--model.init_args.num_minibatches", "7"], "num_minibatches"),
    (
        ["--data.init_args.env", "rl_lightning.envs.GymnasiumEnv", "--data.init_args.env.env_id", "CartPol-v1"],
        "CartPol-v1",
    ),
    (["--num_threads", "0"], "num_threads"),
]


@pytest.mark.parametrize(("extra", "field"), BAD_INPUTS, ids=[f for _, f in BAD_INPUTS])
def test_bad_input_fails_before_training_with_one_clear_line(tmp_path, monkeypatch, capsys, extra, field):
    monkeypatch.chdir(tmp_path)
    err = _run_main(
        ["fit", "--config", "ppo", "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), *extra], capsys
    )
    error_lines = [line for line in err.splitlines() if "error" in line.lower()]
    assert error_lines
    assert field in error_lines[-1]
    assert not list(tmp_path.rglob("*.ckpt"))  # nothing trained, nothing written


def test_unknown_config_name_lists_bundled_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = _run_main(["fit", "--config", "ppo_cartpol"], capsys)
    assert "ppo_cartpol" in err
    assert "configs/ppo.yaml" in err


def test_checkpoint_of_another_algorithm_is_refused_by_the_cli(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.chdir(tmp_path)
    config = ROOT / "configs" / "ppo.yaml"
    cli = cli_main(["fit", "--config", "ppo", *_fast_overrides(tmp_path, config)])
    ckpt = Path(cli.trainer.log_dir) / "checkpoints" / "last.ckpt"
    data = torch.load(ckpt, weights_only=False)
    data["policy_revision"]["family"] = "dreamer"
    torch.save(data, tmp_path / "dreamer.ckpt")
    before = sorted(os.listdir(Path(cli.trainer.log_dir) / "checkpoints"))
    err = _run_main(
        ["fit", "--config", "ppo", *_fast_overrides(tmp_path, config), "--ckpt_path", str(tmp_path / "dreamer.ckpt")],
        capsys,
    )
    assert "family 'dreamer'" in err.splitlines()[-1]
    assert sorted(os.listdir(Path(cli.trainer.log_dir) / "checkpoints")) == before


def test_bundled_dirs_found():
    assert bundled_dirs()
