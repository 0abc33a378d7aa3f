"""Plumbing for processes this package starts: die with the parent, and find or kill them by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Ask the kernel to send ``signum`` to the calling process when its parent dies (Linux ``PR_SET_PDEATHSIG``).

    Call it first thing in a child (or in ``preexec_fn``). A parent that died before the call is caught by the
    ``getppid`` check the caller makes afterwards (``parent_gone``); elsewhere than Linux this does nothing and the
    children rely on their own heartbeat of the parent.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signum))  # 1 = PR_SET_PDEATHSIG


def parent_gone(parent_pid: int) -> bool:
    """Whether the process that started this one has exited (the child was re-parented)."""
    return os.getppid() != parent_pid


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
