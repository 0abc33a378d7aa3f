"""The learner's waits for its actors, lent to background work of the same process.

With actor processes (``data.num_actors``) the learner's main thread spends part of every update blocked on its
actors' rollouts. Work started in a thread of the learner (``GameEvaluation(background=True)``) runs only then: the
actor pool opens the gate around each of its waits (``learner_waiting``), and the background thread passes
``pause_point`` at every step of its work, blocking while the gate is shut. So the two threads never compete for
the GIL for longer than one step of the background work (a Python thread that competes with torch's GIL releases
takes most of the time of a many-kernel update), and the work fills time the learner would have idled.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_open = threading.Event()
_local = threading.local()
_POLL_S = 0.1


class Abandoned(Exception):
    """Raised at a pause point of background work whose owner gave up on it (the run ended or failed)."""


@contextlib.contextmanager
def learner_waiting() -> Iterator[None]:
    """Around a wait of the learner's main thread (for rollouts, or for the background work itself): background
    threads may run meanwhile."""
    _open.set()
    try:
        yield
    finally:
        _open.clear()


def run_gated(cancel: threading.Event) -> None:
    """Mark the calling thread as background work: from now on its ``pause_point`` calls wait for the learner's
    waits, and raise ``Abandoned`` once ``cancel`` is set."""
    _local.cancel = cancel


def pause_point() -> None:
    """A step boundary of possibly-background work: returns at once in any thread not marked by ``run_gated``;
    in a marked one, blocks until the learner waits (or raises ``Abandoned`` when cancelled)."""
    cancel = getattr(_local, "cancel", None)
    if cancel is None:
        return
    while not _open.wait(_POLL_S):
        if cancel.is_set():
            raise Abandoned
    if cancel.is_set():
        raise Abandoned
