"""``FaultCheckpoint``: an exception, SIGTERM or Ctrl+C leaves ``last.ckpt`` of the last completed update."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from rl_lightning.algos.base import COUNTERS_KEY


class Interrupted(SIGTERMException):
    """Raised at an update boundary after a SIGINT (Ctrl+C), like Lightning's ``SIGTERMException`` for SIGTERM."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


class FaultCheckpoint(Callback):
    """Writes a resumable ``last.ckpt`` when a fit ends by an exception or a signal, so no finished update is lost.

    When it fires:
        * SIGTERM (what schedulers send before preemption): Lightning stops at the end of the running update and
          raises ``SIGTERMException``; the live state is then consistent and is saved.
        * SIGINT (Ctrl+C): the first press is deferred to the next update boundary the same way (a second press
          aborts at once, falling back to the snapshot below).
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
        self._signal: int | None = None
        self._previous_sigint: Any = None

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous_sigint = signal.signal(signal.SIGINT, self._on_sigint)

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._signal is not None:
            raise Interrupted(self._signal)
        with _without_replay_storage(trainer.datamodule):
            checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
        self._snapshot = _clone_tensors(checkpoint)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore_sigint()

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._restore_sigint()
        if trainer.state.fn != "fit" or self._snapshot is None:
            return
        checkpoint = self._snapshot
        if isinstance(exception, SIGTERMException):  # raised between updates: the live state is consistent
            with contextlib.suppress(Exception):
                checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
        if self._snapshot is not None and _between_updates(trainer):  # e.g. the end-of-fit evaluation raised
            with contextlib.suppress(Exception):
                checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
        if not checkpoint.get(COUNTERS_KEY, {}).get("updates"):
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

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self._signal is not None:  # second Ctrl+C: abort now
            self._restore_sigint()
            raise KeyboardInterrupt
        self._signal = signum
        print("rl-lightning: stopping after this update (Ctrl+C again to abort at once)", file=sys.stderr)

    def _restore_sigint(self) -> None:
        if self._previous_sigint is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._previous_sigint)
        self._previous_sigint = None


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
