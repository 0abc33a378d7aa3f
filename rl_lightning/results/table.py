"""The results table: per metric, task and group, the final value of each seed, their median and IQR, and runtime.

A run's final value is the last value it logged of the metric; its wall time runs from its first event to its last
scalar; its env steps are the last env step it logged anything at; env steps/s is the one over the other. A group's
runtime columns are the medians over its seeds.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rl_lightning.results.options import Reference
from rl_lightning.results.run import Run


@dataclass(frozen=True)
class RunRow:
    """One seed's numbers."""

    source: str
    seed: int | None
    final: float
    wall_seconds: float
    env_steps: int

    @property
    def env_steps_per_s(self) -> float:
        """Env steps over wall seconds (NaN for a run with no wall time)."""
        return self.env_steps / self.wall_seconds if self.wall_seconds > 0 else float("nan")


@dataclass(frozen=True)
class GroupRow:
    """One line of the table: a group's seeds on one task, for one metric."""

    metric: str
    task: str
    group: str
    reference: bool
    runs: tuple[RunRow, ...]

    @property
    def finals(self) -> np.ndarray:
        return np.array([run.final for run in self.runs])

    @property
    def median(self) -> float:
        return float(np.median(self.finals))

    @property
    def iqr(self) -> float:
        """The interquartile range of the final values (75th minus 25th percentile, linear interpolation)."""
        q25, q75 = np.percentile(self.finals, [25, 75])
        return float(q75 - q25)

    def runtime(self, name: str) -> float:
        """The median over seeds of a ``RunRow`` figure (``wall_seconds``, ``env_steps``, ``env_steps_per_s``)."""
        return float(np.median([getattr(run, name) for run in self.runs]))


def rows(runs: Sequence[Run], metric: str) -> list[GroupRow]:
    """The rows for ``metric``, by task then group (the runs' order), seeds by seed; runs without it left out."""
    by_key: dict[tuple[str, str, bool], list[RunRow]] = {}
    for run in runs:
        if metric in run.scalars and len(run.scalars[metric].values):
            by_key.setdefault((str(run.task), run.group, run.reference), []).append(
                RunRow(
                    source=run.source,
                    seed=run.seed,
                    final=float(run.scalars[metric].values[-1]),
                    wall_seconds=run.wall_seconds,
                    env_steps=run.env_steps,
                )
            )
    tasks = list(dict.fromkeys(task for task, _, _ in by_key))
    ordered = sorted(by_key, key=lambda key: (tasks.index(key[0]), key[2]))
    return [
        GroupRow(
            metric=metric,
            task=task,
            group=group,
            reference=ref,
            runs=tuple(sorted(by_key[(task, group, ref)], key=_seed_order)),
        )
        for task, group, ref in ordered
    ]


def markdown(table: Sequence[GroupRow], references: Sequence[Reference], first_metric: str) -> str:
    """The rows as markdown, one table per metric; ``references`` listed under the first metric's table."""
    lines: list[str] = []
    for metric in dict.fromkeys(row.metric for row in table):
        lines += [
            f"## {metric}",
            "",
            "| task | group | seeds | final per seed | median | IQR | wall time (s) | env steps/s | env steps |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in (row for row in table if row.metric == metric):
            finals = "; ".join(f"{_seed_name(run, i)}: {num(run.final)}" for i, run in enumerate(row.runs))
            group = f"{row.group} (reference runs)" if row.reference else row.group
            lines.append(
                f"| {row.task} | {group} | {len(row.runs)} | {finals} | {num(row.median)} | {num(row.iqr)} | "
                f"{num(row.runtime('wall_seconds'))} | {num(row.runtime('env_steps_per_s'))} | "
                f"{num(row.runtime('env_steps'))} |"
            )
        if metric == first_metric and references:
            lines += [
                "",
                "References: "
                + "; ".join(
                    f"{ref.name} {num(ref.value)}" + (f" ({ref.task})" if ref.task else "") for ref in references
                ),
            ]
        lines.append("")
    return "\n".join(lines)


def to_json(table: Sequence[GroupRow]) -> list[dict[str, Any]]:
    """The rows as JSON-ready data, every seed's numbers in full precision."""
    return [
        {
            "metric": row.metric,
            "task": row.task,
            "group": row.group,
            "reference": row.reference,
            "median": row.median,
            "iqr": row.iqr,
            "wall_seconds": row.runtime("wall_seconds"),
            "env_steps_per_s": row.runtime("env_steps_per_s"),
            "env_steps": row.runtime("env_steps"),
            "runs": [
                {
                    "source": r.source,
                    "seed": r.seed,
                    "final": r.final,
                    "wall_seconds": r.wall_seconds,
                    "env_steps": r.env_steps,
                    "env_steps_per_s": r.env_steps_per_s,
                }
                for r in row.runs
            ],
        }
        for row in table
    ]


def csv_text(table: Sequence[GroupRow]) -> str:
    """One CSV line per seed: metric, task, group, reference, source, seed, final, wall_seconds, env steps(/s)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [
            "metric",
            "task",
            "group",
            "reference",
            "source",
            "seed",
            "final",
            "wall_seconds",
            "env_steps",
            "env_steps_per_s",
        ]
    )
    for row in table:
        for run in row.runs:
            writer.writerow(
                [
                    row.metric,
                    row.task,
                    row.group,
                    row.reference,
                    run.source,
                    run.seed,
                    repr(run.final),
                    repr(run.wall_seconds),
                    run.env_steps,
                    repr(run.env_steps_per_s),
                ]
            )
    return out.getvalue()


def num(value: float) -> str:
    """A number as the table shows it: six significant digits, integers without a decimal point."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:.6g}"


def _seed_order(run: RunRow) -> tuple[bool, int, str]:
    return (run.seed is None, run.seed or 0, run.source)


def _seed_name(run: RunRow, index: int) -> str:
    return f"seed {run.seed}" if run.seed is not None else f"run {index + 1}"
