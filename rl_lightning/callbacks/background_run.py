"""``BackgroundRun``: one evaluation played in a thread of the learner while training goes on.

The thread is marked as gated work (``rl_lightning.learner_waits``): it advances only while the learner's main
thread waits for its actors, one step (a game tick) at a time, so it takes the learner's idle time and not its
update's. ``wait`` lends it the main thread's time until it ends; ``abandon`` stops it at its next step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from rl_lightning.learner_waits import Abandoned, learner_waiting, run_gated

#: How long ``abandon`` waits for the thread to reach its next step and exit.
ABANDON_TIMEOUT_S = 10.0


class BackgroundRun:
    """Runs ``play()`` in a daemon thread; remembers the env step and update it stands for.

    Args:
        play: the work; returns the record to log.
        env_steps: the learner's env-step counter when the work was taken (where its record is logged).
        updates: the learner's update counter then.
    """

    def __init__(self, play: Callable[[], dict[str, float]], env_steps: int, updates: int) -> None:
        self.env_steps, self.updates = env_steps, updates
        self._cancel = threading.Event()
        self._record: dict[str, float] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(play,), name="background-evaluation", daemon=True)
        self._thread.start()

    def _run(self, play: Callable[[], dict[str, float]]) -> None:
        run_gated(self._cancel)
        try:
            self._record = play()
        except Abandoned:
            pass
        except BaseException as err:  # re-raised in the learner's thread by ``wait``
            self._error = err

    def done(self) -> bool:
        """Whether the work has ended (played, failed or abandoned)."""
        return not self._thread.is_alive()

    def wait(self) -> dict[str, float]:
        """The record, the learner's thread waiting (and so letting the work run) until it is played; what the
        work raised is raised here."""
        with learner_waiting():
            self._thread.join()
        if self._error is not None:
            raise self._error
        if self._record is None:
            raise RuntimeError("the background evaluation was abandoned; it has no record")
        return self._record

    def abandon(self) -> None:
        """Stop the work at its next step and join its thread (the run ended without waiting for it)."""
        self._cancel.set()
        self._thread.join(ABANDON_TIMEOUT_S)
