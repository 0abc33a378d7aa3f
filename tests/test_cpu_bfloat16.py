"""The notice for ``trainer.precision: bf16-mixed`` on a CPU that would only emulate bfloat16."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest

from rl_lightning.cli import cli_main
from rl_lightning.settings import cpu_bfloat16
from rl_lightning.settings.cpu_bfloat16 import cpu_flags, emulated_bfloat16_notice

EMULATED = {"fpu", "sse2", "avx2", "avx512f", "avx512bw"}
NATIVE = EMULATED | {"avx512_bf16"}


def cpu_trainer(precision: str) -> pl.Trainer:
    return pl.Trainer(accelerator="cpu", precision=precision, logger=False, enable_progress_bar=False)


def test_cpu_flags_read_from_proc_cpuinfo_form(tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n")
    assert cpu_flags(info) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("precision", "flags", "notice"),
    [
        ("bf16-mixed", EMULATED, True),
        ("bf16-true", EMULATED, True),
        ("bf16-mixed", NATIVE, False),
        ("bf16-mixed", EMULATED | {"amx_bf16"}, False),
        ("32-true", EMULATED, False),
    ],
)
def test_notice_only_for_bfloat16_on_a_cpu_without_native_support(precision, flags, notice) -> None:
    line = emulated_bfloat16_notice(cpu_trainer(precision), flags)
    assert (line is not None) == notice
    if notice:
        assert line.startswith(f"trainer.precision={precision} on a CPU without native bfloat16")
        assert "--trainer.precision 32-true" in line


def test_unreadable_flags_give_no_guess(monkeypatch) -> None:
    monkeypatch.setattr(cpu_bfloat16, "cpu_flags", lambda: None)
    assert emulated_bfloat16_notice(cpu_trainer("bf16-mixed")) is None


def test_fit_warns_before_training_where_bfloat16_is_emulated(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cpu_bfloat16, "cpu_flags", lambda: set(EMULATED))
    args = ["fit", "--config", "ppo", "--trainer.precision", "bf16-mixed", "--trainer.logger", "false"]
    args += ["--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false"]
    args += ["--data.init_args.total_env_steps", "64", "--data.init_args.num_envs", "2"]
    args += ["--data.init_args.num_steps", "16", "--trainer.callbacks", "[]"]
    with pytest.warns(UserWarning, match=r"trainer\.precision=bf16-mixed on a CPU without native bfloat16"):
        cli_main(args)
