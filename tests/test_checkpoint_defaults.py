"""``RLCheckpoint`` from a YAML that leaves ``save_last`` out still writes ``last.ckpt`` (its documented default)."""

from __future__ import annotations

from pathlib import Path

from rl_lightning.cli import cli_main


def test_rlcheckpoint_from_yaml_without_save_last_writes_last_ckpt(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    fragment = tmp_path / "checkpoint_only.yaml"
    fragment.write_text(
        "trainer:\n  callbacks:\n    - class_path: rl_lightning.callbacks.RLCheckpoint\n"
        "      init_args: {every_n_updates: 1}\n"
    )
    cli = cli_main(
        ["fit", "--config", "ppo", "--config", str(fragment), "--data.init_args.num_steps", "8",
         "--data.init_args.total_env_steps", "128", "--model.init_args.update_epochs", "1",
         "--trainer.enable_progress_bar", "false"]  # fmt: skip
    )
    assert (Path(cli.trainer.log_dir) / "checkpoints" / "last.ckpt").is_file()
