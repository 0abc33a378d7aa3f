"""Which checkpoint ``--ckpt_path last`` means, and where ``validate``/``test`` of a checkpoint log: beside the fit
run that wrote it."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl

from rl_lightning.errors import ConfigError


def log_beside_run(trainer: pl.Trainer, ckpt_path: str, subcommand: str) -> None:
    """Log ``validate``/``test`` of a checkpoint in its fit run's folder: ``<name>/version_K/<subcommand>``.

    A logger without a set version would open a new ``version_N`` sibling of the fit run for a few numbers;
    a checkpoint under ``<save_dir>/<name>/version_K/checkpoints/`` of the same logger puts them under that run
    instead (TensorBoard lists ``version_K/test`` beside ``version_K``). Loggers given a version keep it; a
    checkpoint from elsewhere gets the usual new version.
    """
    ckpt = Path(ckpt_path).resolve()
    if ckpt.parent.name != "checkpoints":
        return
    run = ckpt.parent.parent
    for logger in trainer.loggers:
        root = getattr(logger, "root_dir", None)
        if root and getattr(logger, "_version", 0) is None and Path(root).resolve() == run.parent:
            logger._version = f"{run.name}/{subcommand}"  # the version a TensorBoard/CSV logger names its folder by


def find_last_checkpoint(trainer: pl.Trainer, required: bool) -> str | None:
    """Newest ``last*.ckpt`` of any earlier version of this run (its logger's ``save_dir/name``), if one exists."""
    roots = []
    logger = trainer.logger
    if logger is not None and getattr(logger, "root_dir", None):
        roots.append(Path(logger.root_dir))
    for callback in trainer.checkpoint_callbacks:
        if getattr(callback, "dirpath", None):
            roots.append(Path(callback.dirpath))
    found = [p for root in roots if root.exists() for p in root.rglob("last*.ckpt")]
    if not found and required:
        raise ConfigError(
            f"ckpt_path=last: no last*.ckpt under {[str(r) for r in roots]}; pass --ckpt_path PATH, or the same "
            "trainer.logger save_dir/name as the fit run"
        )
    if not found:
        pl.utilities.rank_zero_warn(f"ckpt_path=last: no last*.ckpt under {[str(r) for r in roots]}; starting fresh")
        return None
    return str(max(found, key=lambda p: p.stat().st_mtime))
