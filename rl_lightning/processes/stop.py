"""A stop request (SIGTERM, Ctrl+C) honoured within one env tick or one gradient step, in every phase of a run.

Lightning alone stops on SIGTERM at the end of the running ``training_step``. Here one ``training_step`` can be a
whole rollout, a random-prefill window or thousands of gradient steps, and an evaluation callback can play long
episodes: each can outlast the ~30 s a scheduler leaves between SIGTERM and SIGKILL. So the handlers that
``signals_request_stop`` installs only record the request, and the loops call ``check()`` at every env tick and
gradient step (a read of a module global: no tensor, no host sync). ``check()`` raises ``Interrupted``;
``FaultCheckpoint`` then saves the last completed update (never a half-collected rollout or a half-done update)
and the CLI prints one line and exits with 128 + the signal number.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from lightning.pytorch.utilities.exceptions import SIGTERMException

_requested: int | None = None  # the signal that asked to stop, until the run that installed the handlers ends
_installed = False
_STOPPING = "rl-lightning: stopping at the next env step or gradient step (Ctrl+C again to abort at once)"


class Interrupted(SIGTERMException):
    """A stop request (SIGTERM, or the first Ctrl+C) honoured at an env tick, a gradient step or an update boundary.

    A ``SIGTERMException`` (hence a ``SystemExit``), like the one Lightning raises at an update boundary, so code
    catching ``Exception`` lets it through and the CLI handles both alike. ``code`` is 128 + ``signum``.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


def requested() -> int | None:
    """The signal number of the pending stop request, or ``None``."""
    return _requested


def request(signum: int = signal.SIGTERM) -> None:
    """Ask the running loops to stop at their next ``check()`` (what the signal handlers do)."""
    global _requested
    if _requested is None:
        _requested = signum


def check() -> None:
    """Raise ``Interrupted`` if a stop was requested; call at every env tick and gradient step."""
    if _requested is not None:
        raise Interrupted(_requested)


@contextlib.contextmanager
def signals_request_stop() -> Iterator[None]:
    """While open, SIGTERM and a first Ctrl+C request a stop (``check()`` raises); a second Ctrl+C aborts at once.

    Installs the handlers in the main thread only (elsewhere Python cannot), and only once: a nested use (the CLI
    around a fit, and ``FaultCheckpoint`` inside it) changes nothing. A SIGTERM handler that was there before
    (Lightning's, which marks ``trainer.received_sigterm``, or a user's) is still called. On leaving, the previous
    handlers come back and the request is forgotten, so a later run in the same process starts clean.
    """
    global _installed, _requested
    if _installed or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            if _requested is not None:  # a second Ctrl+C: abort now, without saving the live state
                signal.signal(signal.SIGINT, previous[signal.SIGINT])
                raise KeyboardInterrupt
            print(_STOPPING, file=sys.stderr)
        else:
            _chain(previous[signal.SIGTERM], signum, frame)
        request(signum)

    for signum in previous:
        signal.signal(signum, on_signal)
    _installed, _requested = True, None
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        _installed, _requested = False, None


def _chain(handler: Any, signum: int, frame: FrameType | None) -> None:
    """Call a handler that was installed before ours (not the defaults, which would end the process)."""
    if callable(handler) and handler not in (signal.default_int_handler,):
        handler(signum, frame)
