"""Across tasks: the interquartile mean (IQM) of normalised final scores, with rliable's stratified bootstrap.

Each run's final value of the first ``--metric`` is normalised with its task's ``--normalise TASK=LOW:HIGH``
(``(x - LOW) / (HIGH - LOW)``: 0 a random policy, 1 the reference). An algorithm is a ``--label`` where runs have one,
else the model's class (``PPO``): config groups are named per task, so they would never span tasks. Its scores form
rliable's ``[runs, tasks]`` matrix, so each algorithm needs the same number of runs on every task; the interval
resamples runs within each task (``rliable.library.get_interval_estimates``, percentile method).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rl_lightning.errors import ConfigError
from rl_lightning.results.options import Normalise
from rl_lightning.results.run import Run


@dataclass(frozen=True)
class Aggregate:
    """One algorithm's IQM over tasks and its confidence interval."""

    algorithm: str
    tasks: tuple[str, ...]
    runs_per_task: int
    iqm: float
    low: float
    high: float


def algorithm_of(run: Run) -> str:
    """What a run counts as in the aggregate: its label, else its model class, else its config's name."""
    return run.label or run.algorithm or run.config


def scores(runs: Sequence[Run], metric: str, ranges: Sequence[Normalise]) -> dict[str, np.ndarray]:
    """Algorithm → normalised final scores ``[runs, tasks]`` (tasks in ``ranges`` order); refuses, in one line, a task
    with no range, a range for no task, and an algorithm short of runs on a task."""
    by_task = {r.task: r for r in ranges}
    tasks = sorted({str(run.task) for run in runs})
    if missing := [task for task in tasks if task not in by_task]:
        raise ConfigError(
            f"--normalise: no range for task {missing[0]} (the runs' tasks: {', '.join(tasks)}); "
            f"give each one: --normalise '{missing[0]}=LOW:HIGH'"
        )
    if unused := [r.task for r in ranges if r.task not in tasks]:
        raise ConfigError(f"--normalise {unused[0]}: no run is of that task (the runs' tasks: {', '.join(tasks)})")
    finals: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        if metric in run.scalars and len(run.scalars[metric].values):
            bounds = by_task[str(run.task)]
            score = (float(run.scalars[metric].values[-1]) - bounds.low) / (bounds.high - bounds.low)
            finals.setdefault(algorithm_of(run), {}).setdefault(str(run.task), []).append(score)
    order = [r.task for r in ranges]
    matrices = {}
    for algorithm, per_task in finals.items():
        counts = {task: len(per_task.get(task, [])) for task in order}
        if len(set(counts.values())) != 1:
            listed = ", ".join(f"{task}: {n}" for task, n in counts.items())
            raise ConfigError(
                f"--normalise: {algorithm} has runs of {metric} in unequal numbers per task ({listed}); "
                "the stratified bootstrap needs as many on each task: pass the same seeds of each"
            )
        matrices[algorithm] = np.array([per_task[task] for task in order]).T  # [runs, tasks]
    return matrices


def interquartile_means(
    matrices: dict[str, np.ndarray], tasks: Sequence[str], reps: int = 2000, ci: float = 0.95, seed: int = 0
) -> list[Aggregate]:
    """The IQM (``scipy.stats.trim_mean(x, 0.25)`` over all runs and tasks) of each matrix with rliable's interval.

    rliable's stratified bootstrap draws from numpy's global random state; it is seeded with ``seed`` for the call
    and put back afterwards, so the interval is the same on every run and the caller's state is left alone.
    """
    from rliable import library, metrics

    state = np.random.get_state()
    np.random.seed(seed)
    try:
        point, interval = library.get_interval_estimates(
            matrices, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=reps, confidence_interval_size=ci
        )
    finally:
        np.random.set_state(state)
    return [
        Aggregate(
            algorithm=name,
            tasks=tuple(tasks),
            runs_per_task=int(matrix.shape[0]),
            iqm=float(point[name][0]),
            low=float(interval[name][0][0]),
            high=float(interval[name][1][0]),
        )
        for name, matrix in matrices.items()
    ]


def markdown(rows: Sequence[Aggregate], metric: str, ci: float) -> str:
    """The aggregate as a markdown section."""
    lines = [
        f"## Aggregate: IQM of normalised final {metric}",
        "",
        f"| algorithm | tasks | runs per task | IQM | {ci:.0%} CI |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.algorithm} | {', '.join(r.tasks)} | {r.runs_per_task} | {r.iqm:.4g} | [{r.low:.4g}, {r.high:.4g}] |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def to_json(rows: Sequence[Aggregate]) -> list[dict[str, Any]]:
    """The aggregate as JSON-ready data."""
    return [
        {
            "algorithm": r.algorithm,
            "tasks": list(r.tasks),
            "runs_per_task": r.runs_per_task,
            "iqm": r.iqm,
            "ci_low": r.low,
            "ci_high": r.high,
        }
        for r in rows
    ]
