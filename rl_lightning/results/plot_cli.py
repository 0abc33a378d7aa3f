"""``rl-lightning plot RUN_DIR_OR_GLOB... --out DIR``: curves, a table and an aggregate from TensorBoard runs.

Dispatched by ``rl_lightning.cli.main`` before LightningCLI. Every check (paths, tags, tasks, the options' syntax,
the ``plot`` extra) runs before anything is drawn; a failed one is a ``ConfigError``, which ``main`` prints as one
``rl-lightning: error: ...`` line with exit code 2. The guide: docs/guides/plots.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from rl_lightning.errors import ConfigError
from rl_lightning.results import aggregate, curves, draw, summary, table
from rl_lightning.results.plan import Plan, plan


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are the project's one-line ``ConfigError`` instead of usage text and exit 2."""

    def error(self, message: str) -> NoReturn:
        usage = " ".join(self.format_usage().split()).removeprefix("usage: ")  # one line, however argparse wraps it
        raise ConfigError(f"plot: {message}; usage: {usage}")


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="rl-lightning plot",
        description="Draw TensorBoard runs (or run summaries) against env steps "
        "and wall time, with a table of final values and runtimes.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN_DIR_OR_GLOB", help="run folders, globs or summary .json files")
    p.add_argument("--out", required=True, help="the folder to write figures, summary.md/.json/.csv into")
    p.add_argument(
        "--metric",
        action="append",
        help="scalar tag to draw (repeatable, or a comma list; default "
        "eval/episode_return); the first is the one references and the aggregate are of",
    )
    p.add_argument("--label", action="append", metavar="GLOB=LABEL", help="draw the runs under GLOB as one group")
    p.add_argument("--task", action="append", metavar="GLOB=TASK", help="the task of runs with no config.yaml")
    p.add_argument(
        "--reference",
        action="append",
        metavar="NAME=VALUE[@TASK]",
        help="a published figure, drawn as a horizontal line (e.g. rl-zoo=5819)",
    )
    p.add_argument(
        "--reference-runs",
        action="append",
        metavar="LABEL=GLOB[@TASK]",
        help="a peer's runs, drawn dashed as another curve",
    )
    p.add_argument(
        "--normalise",
        "--normalize",
        action="append",
        metavar="TASK=LOW:HIGH",
        help="score range of a task (random:reference): with one per task, an rliable IQM aggregate across tasks",
    )
    p.add_argument("--log-y", action="store_true", help="the metric on a log axis (exploitability, losses: > 0)")
    p.add_argument("--size", default="1200x450", metavar="WxH", help="figure size in pixels (default 1200x450)")
    p.add_argument("--ci", type=float, default=0.95, help="confidence level of the bands (default 0.95)")
    p.add_argument("--reps", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap generators (default 0)")
    p.add_argument("--points", type=int, default=200, help="grid points when seeds were logged at different x")
    p.add_argument("--write-summaries", metavar="DIR", help="also write one run summary JSON per run into DIR")
    return p


def main(args: Sequence[str]) -> int:
    """Parse ``args`` (after ``plot``), check everything, then write the figures and tables; prints what it wrote."""
    ns = parser().parse_intermixed_args(list(args))  # run folders may come between the options
    if ns.reps < 1 or ns.points < 2:
        raise ConfigError(f"plot: --reps {ns.reps} and --points {ns.points} must be at least 1 and 2")
    todo = plan(ns)
    todo.out.mkdir(parents=True, exist_ok=True)
    written = [path for task in todo.tasks for metric in todo.metrics for path in _figure(todo, ns, task, metric)]
    written += _tables(todo, ns)
    if ns.write_summaries:
        written += _summaries([run for run in todo.runs if not run.reference], Path(ns.write_summaries))
    for path in written:
        print(f"wrote {path}")
    return 0


def _figure(todo: Plan, ns: argparse.Namespace, task: str, metric: str) -> list[Path]:
    """The two-panel figure of one task and metric: a band per group (peers dashed), references on the first metric."""
    drawn = []
    for group, reference in dict.fromkeys((r.group, r.reference) for r in todo.runs if r.task == task):
        seeds = [
            r.scalars[metric]
            for r in todo.runs
            if (r.task, r.group, r.reference) == (task, group, reference)
            and metric in r.scalars
            and len(r.scalars[metric].values)
        ]
        if seeds:
            rng = curves.generator(ns.seed, task, metric, group, str(reference))
            band = curves.band([(s.steps, s.wall, s.values) for s in seeds], rng, ns.reps, ns.ci, ns.points)
            drawn.append(draw.Curve(name=group, band=band, dashed=reference))
    if not drawn:  # no run of this task logged the metric (another task's runs did)
        return []
    refs = [ref for ref in todo.references if ref.task in (None, task)] if metric == todo.metrics[0] else []
    stem = todo.out / f"{_slug(task)}__{_slug(metric)}"
    return draw.curves(task, metric, drawn, refs, todo.size, stem, ns.ci, log_y=ns.log_y)


def _tables(todo: Plan, ns: argparse.Namespace) -> list[Path]:
    """summary.md, summary.json and summary.csv; with --normalise, the aggregate's section and figure too."""
    rows = [row for metric in todo.metrics for row in table.rows(todo.runs, metric)]
    text = "# Results\n\n" + table.markdown(rows, todo.references, todo.metrics[0])
    data: dict[str, object] = {"groups": table.to_json(rows)}
    written = []
    if todo.scores:
        tasks = [n.task for n in todo.normalise]
        overall = aggregate.interquartile_means(todo.scores, tasks, ns.reps, ns.ci, ns.seed)
        text += "\n" + aggregate.markdown(overall, todo.metrics[0], ns.ci)
        data["aggregate"] = aggregate.to_json(overall)
        written += draw.aggregate(overall, todo.metrics[0], todo.size, todo.out / "aggregate", ns.ci)
    paths = [todo.out / "summary.md", todo.out / "summary.json", todo.out / "summary.csv"]
    paths[0].write_text(text)
    paths[1].write_text(json.dumps(data, indent=1) + "\n")
    paths[2].write_text(table.csv_text(rows))
    return paths + written


def _summaries(runs: list, folder: Path) -> list[Path]:
    """One summary JSON per run, named after its path (``runs/ppo/version_0`` → ``runs_ppo_version_0.json``)."""
    written: list[Path] = []
    for run in runs:
        source = Path(run.source)
        name = _slug(os.path.relpath(source.with_suffix("") if source.suffix == ".json" else source))
        path, n = folder / f"{name}.json", 1
        while path in written:
            n += 1
            path = folder / f"{name}-{n}.json"
        written.append(summary.save(run, path))
    return written


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.") or "run"
