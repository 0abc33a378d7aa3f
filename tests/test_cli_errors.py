"""Bad trainer settings, YAML syntax errors and negative numbers as a user types them (subprocess CLI)."""

from __future__ import annotations

import pytest
import torch
import yaml

from tests.cli_subprocess import error_line, run_cli, snapshot

BAD_TRAINER_SETTINGS = [
    pytest.param(
        ["--trainer.accelerator", "gpu"],
        ["trainer.accelerator='gpu'", "available on this machine: cpu"],
        marks=pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU"),
        id="accelerator-gpu-without-gpu",
    ),
    pytest.param(["--trainer.devices", "0"], ["trainer.devices='0'", "a positive int"], id="devices-0"),
    pytest.param(["--trainer.strategy", "fsdb"], ["trainer.strategy='fsdb'", "ddp", "fsdp"], id="unknown-strategy"),
]


@pytest.mark.parametrize(("extra", "expected"), BAD_TRAINER_SETTINGS)
def test_bad_trainer_setting_is_one_line_naming_field_and_choices(tmp_path, extra, expected):
    (tmp_path / "notes.txt").write_text("a file the failed run must leave alone\n")
    before = snapshot(tmp_path)
    line = error_line(run_cli(["fit", "--config", "ppo", *extra], tmp_path))
    for text in expected:
        assert text in line
    assert snapshot(tmp_path) == before


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    bad = tmp_path / "my_run.yaml"
    bad.write_text("model:\n  init_args:\n    lr: 1e-3: 2\n")  # line 3: a second ':' in a plain scalar
    before = snapshot(tmp_path)
    line = error_line(run_cli(["fit", "--config", "ppo", "--config", str(bad)], tmp_path))
    assert f"{bad}:3:" in line
    assert "YAML syntax error" in line
    assert snapshot(tmp_path) == before


def test_negative_number_after_an_option_is_its_value(tmp_path):
    result = run_cli(["fit", "--config", "ppo", "--model.init_args.init_log_std", "-5e-1", "--print_config"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert yaml.safe_load(result.stdout)["model"]["init_args"]["init_log_std"] == -0.5


MINIMAX = "rl_lightning.envs.games.bots.minimax.MinimaxBot"
TYPOS = [
    pytest.param(["fit", "--config", "alphazero_tictactoe", "--model.init_args.simulation", "32"],
                 "did you mean model.init_args.simulations?", id="class-option"),
    pytest.param(["fit", "--config", "ppo", "--data.init_args.num_env", "3"],
                 "did you mean data.init_args.num_envs?", id="datamodule-option"),
    pytest.param(["fit", "--config", "ppo", "--trainer.max_stesp", "3"], "did you mean --trainer.max_steps?",
                 id="trainer-option"),
    pytest.param(["fit", "--config", "ppo", "--modle.init_args.lr", "3"], "did you mean --model.init_args.lr?",
                 id="group"),
    pytest.param(["fit", "--config", "ppo", "--config", "{trainer: {max_stesp: 3}}"], "did you mean trainer.max_steps?",
                 id="config-key"),
    pytest.param(["record", "--config", "ppo_tictactoe", "--bot", MINIMAX + "t", "--games", "1", "--out", "rec"],
                 f"did you mean {MINIMAX}?", id="bot-class"),
    pytest.param(["record", "--config", "ppo_tictactoe", "--bot", MINIMAX.replace("minimax", "minmax"), "--games",
                  "1", "--out", "rec"], f"did you mean {MINIMAX}?", id="bot-module"),
    pytest.param(["fit", "--config", "ppo_tictactoe_selfplay", "--data.init_args.seats", f"{{0: self, 1: {MINIMAX}t}}"],
                 f"did you mean {MINIMAX}?", id="seat-bot"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "hint"), TYPOS)
def test_a_typo_is_answered_with_the_nearest_name(tmp_path, args, hint):
    """A misspelled option or bot gets the nearest valid one (difflib), as ``tune`` does for its keys; a bot was
    offered ``HeartsHeuristic`` whatever its name, an option nothing."""
    before = snapshot(tmp_path)
    line = error_line(run_cli(args, tmp_path))
    assert line.endswith(hint) or f"{hint} " in line or f"{hint};" in line, line
    assert "HeartsHeuristic" not in line
    assert snapshot(tmp_path) == before
