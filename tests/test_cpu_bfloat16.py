"""``trainer.precision: bf16-mixed`` on a CPU that would only emulate bfloat16: the CLI runs float32 and says so."""

from __future__ import annotations

import pytest

from rl_lightning.cli import cli_main
from rl_lightning.settings import cpu_bfloat16
from rl_lightning.settings.cpu_bfloat16 import cpu_flags, float32_fallback

EMULATED = {"fpu", "sse2", "avx2", "avx512f", "avx512bw"}
NATIVE = EMULATED | {"avx512_bf16"}


def test_cpu_flags_read_from_proc_cpuinfo_form(tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n")
    assert cpu_flags(info) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("precision", "accelerator", "flags", "falls_back"),
    [
        ("bf16-mixed", "cpu", EMULATED, True),
        ("bf16-true", "cpu", EMULATED, True),
        ("bf16-mixed", "auto", EMULATED, True),  # no GPU in this test process's view (patched below)
        ("bf16-mixed", "cpu", NATIVE, False),
        ("bf16-mixed", "cpu", EMULATED | {"amx_bf16"}, False),
        ("32-true", "cpu", EMULATED, False),
        ("bf16-mixed", "cuda", EMULATED, False),
    ],
)
def test_float32_only_for_bfloat16_on_a_cpu_without_native_support(precision, accelerator, flags, falls_back,
                                                                   monkeypatch) -> None:  # fmt: skip
    monkeypatch.setattr(cpu_bfloat16.torch.cuda, "is_available", lambda: False)
    config = {"precision": precision, "accelerator": accelerator}
    line = float32_fallback(config, flags)
    assert (line is not None) == falls_back
    assert config["precision"] == ("32-true" if falls_back else precision)
    if falls_back:
        assert line.startswith(f"trainer.precision={precision} on a CPU without native bfloat16")
        assert line.endswith("this run uses 32-true")


def test_unreadable_flags_give_no_guess(monkeypatch) -> None:
    monkeypatch.setattr(cpu_bfloat16, "cpu_flags", lambda: None)
    config = {"precision": "bf16-mixed", "accelerator": "cpu"}
    assert float32_fallback(config) is None
    assert config["precision"] == "bf16-mixed"


def test_a_fit_asked_for_bfloat16_on_an_emulating_cpu_runs_float32_says_so_and_records_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cpu_bfloat16, "cpu_flags", lambda: set(EMULATED))
    args = ["fit", "--config", "ppo", "--trainer.precision", "bf16-mixed", "--trainer.enable_checkpointing", "false"]
    args += ["--trainer.enable_progress_bar", "false", "--data.init_args.total_env_steps", "64"]
    args += ["--data.init_args.num_envs", "2", "--data.init_args.num_steps", "16", "--trainer.callbacks", "[]"]
    with pytest.warns(UserWarning, match=r"trainer\.precision=bf16-mixed on a CPU without native bfloat16 .*"
                                         r"this run uses 32-true"):  # fmt: skip
        cli = cli_main(args)
    assert str(cli.trainer.precision) == "32-true"
    saved = next(tmp_path.rglob("config.yaml")).read_text()
    assert "precision: 32-true" in saved
