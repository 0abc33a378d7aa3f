"""Read one TensorBoard run folder with TensorBoard's own loader (``EventAccumulator``) into a ``Run``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

from rl_lightning.results.config import identity
from rl_lightning.results.run import Run, Series

#: The prefix of every TensorBoard event file (``events.out.tfevents.<time>.<host>.<pid>.<n>``).
EVENTS_PREFIX = "events.out.tfevents."


def has_events(folder: Path) -> bool:
    """Whether ``folder`` itself holds an event file: a TensorBoard run folder (one run, one seed)."""
    return any(child.name.startswith(EVENTS_PREFIX) and child.is_file() for child in folder.iterdir())


def read_run(run_dir: Path, source: str | None = None) -> Run:
    """Every scalar tag of the run in ``run_dir``, its wall times counted from the run's first event.

    ``size_guidance`` 0 keeps every point (TensorBoard's default keeps a reservoir sample of 10,000 per tag), and the
    accumulator drops points that a resumed run wrote again (``purge_orphaned_data``), as TensorBoard shows them.
    """
    accumulator = EventAccumulator(str(run_dir), size_guidance={SCALARS: 0})
    accumulator.Reload()
    try:
        start = accumulator.FirstEventTimestamp()
    except ValueError:  # no event at all in the files
        start = 0.0
    scalars = {}
    for tag in accumulator.Tags()[SCALARS]:
        events = accumulator.Scalars(tag)
        scalars[tag] = Series(
            steps=np.array([e.step for e in events], dtype=np.int64),
            wall=np.array([e.wall_time - start for e in events], dtype=np.float64),
            values=np.array([e.value for e in events], dtype=np.float64),
        )
    who = identity(run_dir)
    return Run(
        source=source or str(run_dir),
        task=who.task,
        config=who.config,
        digest=who.digest,
        algorithm=who.algorithm,
        seed=who.seed,
        scalars=scalars,
    )
