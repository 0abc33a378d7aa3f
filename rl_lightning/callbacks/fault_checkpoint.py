"""``FaultCheckpoint``: an exception, SIGTERM or Ctrl+C leaves ``last.ckpt`` of the last completed update."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from rl_lightning.algos.base import COUNTERS_KEY
from rl_lightning.processes import stop
from rl_lightning.processes.stop import Interrupted

__all__ = ["FaultCheckpoint", "Interrupted"]


class FaultCheckpoint(Callback):
    """Writes a resumable ``last.ckpt`` when a fit ends by an exception or a signal, so no finished update is lost.

    When it fires:
        * SIGTERM (what schedulers send before preemption) or a first Ctrl+C: the run stops within one env tick or
          one gradient step, in any phase (``processes.stop``; a second Ctrl+C aborts at once). Stopped inside
          an update (collecting, prefilling, taking gradient steps), it saves the snapshot below; stopped between
          updates (in a callback, e.g. an evaluation), the live state, which is then consistent.
        * Any other exception (env, model, callback): the state may be half-way through a rollout or an update,
          so what is saved is the snapshot taken at the start of the update that failed, i.e. the state after the
          last completed update (weights, optimiser, counters, collector RNG and env state, replay pointers).
          Raised after an update and all its ``on_train_batch_end`` callbacks (the end-of-fit evaluation, epoch-end
          hooks), it saves the live state, which is that last update's.

    The snapshot is Lightning's own checkpoint dict, with every tensor cloned, taken at each
    ``on_train_batch_start`` (after every callback of the previous update has run). It costs one copy of the
    weights and optimiser state per update, kept on their device, plus what the datamodule's ``state_dict`` costs;
    the replay ring's storage (``save_replay``) is left out of it, so a resume after a mid-update failure refills
    the ring. The file goes where ``--ckpt_path last`` looks (the first ``ModelCheckpoint``'s ``dirpath``, else
    ``<log_dir>/checkpoints``), written to a temporary file and renamed, so a failed write never damages an earlier
    ``last.ckpt``. Lightning's ``OnExceptionCheckpoint`` is not used: it saves whatever half-updated state the
    exception left and deletes its file when a run ends normally. A plain ``Callback``, not a ``Checkpoint``, so it
    works with ``enable_checkpointing: false`` and is never taken for the run's ``ModelCheckpoint``. Only global
    rank 0 writes, without collectives (the other ranks may be stuck). What was written is added to the exception
    as a note, which the CLI prints.

    Args:
        filename: file name inside the checkpoint directory; keep ``last.ckpt`` for ``--ckpt_path last``.
    """

    def __init__(self, filename: str = "last.ckpt") -> None:
        if not filename.endswith(".ckpt") or "/" in filename:
            raise ValueError(f"FaultCheckpoint: filename={filename!r} must be a bare name ending in '.ckpt'")
        self.filename = filename
        self._snapshot: dict[str, Any] | None = None
        self._signals = contextlib.ExitStack()

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._signals.enter_context(stop.signals_request_stop())  # a no-op under the CLI, which installed them
        if trainer.received_sigterm:  # arrived during setup, before Lightning's own handler could act on it
            stop.request(signal.SIGTERM)

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        stop.check()
        with _without_replay_storage(trainer.datamodule):
            checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
        self._snapshot = _clone_tensors(checkpoint)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._signals.close()

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._signals.close()
        if trainer.state.fn != "fit":
            return
        checkpoint = self._snapshot or {}
        if isinstance(exception, SIGTERMException) and not _inside_training_step(trainer):  # live state consistent
            with contextlib.suppress(Exception):
                checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
        if self._snapshot is not None and _between_updates(trainer):  # e.g. the end-of-fit evaluation raised
            with contextlib.suppress(Exception):
                checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
        if not checkpoint.get(COUNTERS_KEY, {}).get("updates"):
            if isinstance(exception, SIGTERMException):  # e.g. stopped during the random prefill
                exception.add_note("no update had completed, so no checkpoint was saved")
            return  # no update completed: nothing to save, and nothing written earlier is touched
        note = self._write(trainer, checkpoint)
        if note is None:
            return
        exception.add_note(note)
        if isinstance(exception, KeyboardInterrupt):  # Lightning exits on its own here; the CLI never sees it
            print(f"rl-lightning: {note}", file=sys.stderr)

    def _write(self, trainer: pl.Trainer, checkpoint: dict[str, Any]) -> str | None:
        """Atomically write ``checkpoint`` on global rank 0; returns the note telling the user what happened."""
        if not trainer.is_global_zero:
            return None
        what = f"update {checkpoint[COUNTERS_KEY]['updates']}"
        path = self.directory(trainer) / self.filename
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            trainer.strategy.checkpoint_io.save_checkpoint(checkpoint, tmp)
            os.replace(tmp, path)
        except Exception as err:  # noqa: BLE001 - report it with the original failure, not instead of it
            tmp.unlink(missing_ok=True)
            return f"could not save the checkpoint of {what} to {path} ({type(err).__name__}: {err}); it is unchanged"
        return f"checkpoint of {what} saved to {path}; continue with --ckpt_path last"

    def directory(self, trainer: pl.Trainer) -> Path:
        """Where ``--ckpt_path last`` looks: the first ``ModelCheckpoint``'s dirpath, else ``<log_dir>/checkpoints``."""
        for callback in trainer.checkpoint_callbacks:
            if getattr(callback, "dirpath", None):
                return Path(callback.dirpath)
        return Path(trainer.log_dir or trainer.default_root_dir) / "checkpoints"


def _inside_training_step(trainer: pl.Trainer) -> bool:
    """Whether the running ``training_step`` (collection, prefill, gradient steps) began and has not returned."""
    progress = trainer.fit_loop.epoch_loop.batch_progress.current
    return progress.started > progress.processed


@contextlib.contextmanager
def _without_replay_storage(datamodule: Any) -> Iterator[None]:
    """Leave a replay ring's storage out of the per-update snapshot (copying it every update would be too costly)."""
    saved = getattr(datamodule, "save_replay", False)
    if saved:
        datamodule.save_replay = False
    try:
        yield
    finally:
        if saved:
            datamodule.save_replay = saved


def _between_updates(trainer: pl.Trainer) -> bool:
    """Whether every batch this fit started has completed, ``on_train_batch_end`` callbacks included."""
    progress = trainer.fit_loop.epoch_loop.batch_progress.current
    return progress.started == progress.completed


def _clone_tensors(value: Any) -> Any:
    """A copy of a checkpoint dict whose tensors no longer change with the live ones (same devices, no sync)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {key: _clone_tensors(item) for key, item in value.items()}
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):  # namedtuples are left as they are
        return type(value)(_clone_tensors(item) for item in value)
    return value
