"""Plumbing for processes this package starts: die with the parent, and find or kill them by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Ask the kernel to send ``signum`` to the calling process when its parent dies (Linux ``PR_SET_PDEATHSIG``).

    Call it first thing in a child (or in ``preexec_fn``). A parent that died before the call, and a child whose
    parent is a fork server rather than the process it serves, are caught by ``signal_when_gone`` on the served
    process's pid; elsewhere than Linux this does nothing and that watch is what remains.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signum))  # 1 = PR_SET_PDEATHSIG


def signal_when_gone(pid: int, signum: int, poll_s: float = 0.5) -> None:
    """Send ``signum`` to this process once ``pid`` has exited, within ``poll_s`` (a daemon thread polls it): the
    parent-death signal of a process whose parent is not the one it serves. A child of multiprocessing's fork server
    has the server as its parent, and the server outlives the process that started it as long as any child it
    forked lives (each holds the server's liveness pipe)."""

    def watch() -> None:
        while pid_alive(pid):
            time.sleep(poll_s)
        os.kill(os.getpid(), signum)

    threading.Thread(target=watch, name=f"signal-when-{pid}-exits", daemon=True).start()


def forking_context(preload: Sequence[str]) -> Any:
    """The multiprocessing context of this package's child processes (actors, a tuning trial's fits).

    ``forkserver`` where the platform has it: the first child starts one clean server process (it never runs a torch
    op, so forking it copies no thread pool) that imports ``preload`` and the program's main module once, and every
    child is forked from it in milliseconds instead of re-importing torch and Lightning (~4 CPU seconds with
    ``spawn``). Start children inside ``child_environ(**server_environ())``: the server copies the environment as it
    starts. Elsewhere (Windows) ``spawn``.
    """
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["__main__", "rl_lightning.processes.forkserver_preload", *preload])
    return context


def server_environ() -> dict[str, str]:
    """What the fork server reads as it starts: the program's main module by name, when it runs as ``python -m``
    (``rl_lightning.processes.forkserver_preload``)."""
    from rl_lightning.processes.forkserver_preload import MAIN_MODULE_VARIABLE

    name = getattr(getattr(sys.modules["__main__"], "__spec__", None), "name", None)
    return {MAIN_MODULE_VARIABLE: name} if name else {}


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` names a live process (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:  # no /proc: ask the kernel directly
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def kill_pid(pid: int) -> None:
    """SIGKILL ``pid`` if it still exists."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def child_environ(**defaults: str) -> Iterator[None]:
    """Set ``defaults`` in ``os.environ`` where unset while a child is started (a spawned interpreter copies the
    environment as it starts), then restore it: the parent's own environment is left as the user set it."""
    added = {name: value for name, value in defaults.items() if name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)
