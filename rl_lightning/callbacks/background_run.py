"""``BackgroundRun``: one evaluation played in a thread of the learner while training goes on.

The thread is marked as gated work (``rl_lightning.processes.learner_waits``): it advances only while the learner's main
thread waits for its actors, one step (a game tick) at a time, so it takes the learner's idle time and not its
update's. ``wait`` lends it the main thread's time until it ends; ``abandon`` stops it at its next step.
``frozen_policy`` is the copy of the policy such work plays, and ``plays_beside_training`` says where it can run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info

from rl_lightning.processes.learner_waits import Abandoned, learner_waiting, run_gated

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


def plays_beside_training(owner: str, datamodule: Any, world_size: int) -> bool:
    """Whether ``owner``'s ``background=true`` can take effect: the learner must wait for actors
    (``data.num_actors``), on one device. Otherwise a notice says why, and the evaluations play in the foreground."""
    why = ""
    if not getattr(datamodule, "num_actors", 0):
        why = "with data.num_actors=0 the learner never waits for actors"
    elif world_size > 1:
        why = f"on {world_size} devices each rank would log its record at a different update"
    if why:
        rank_zero_info(f"{owner}: background=true, but {why}: evaluations play in the foreground")
    return not why


def frozen_policy(module: Any, copy: Any = None) -> Any:
    """``module``'s policy as it is now, in a copy training cannot change: ``copy`` (the one an earlier call made),
    or a new one built as an actor process builds its own (``policy_factory``: the class and its constructor
    arguments, without ``init_weights``), on ``module``'s device, in eval mode and without gradients.

    ``load_state_dict`` brings every weight and persistent buffer (observation normalisers' running statistics
    included: they are buffers of the module) and the ``updates``/``policy_version`` counters come along, so the copy
    acts exactly as ``module`` acts now.
    """
    if copy is None:
        copy = module.policy_factory().build().requires_grad_(False).eval().to(module.device)
    copy.load_state_dict(module.state_dict())
    copy.updates, copy.policy_version = module.updates, module.policy_version
    if module.device.type == "cuda":  # the thread that plays it uses its own (default) stream: the copy lands first
        torch.cuda.current_stream(module.device).synchronize()
    return copy
