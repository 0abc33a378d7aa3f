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
