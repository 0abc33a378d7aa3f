"""Everything ``rl-lightning plot`` will draw, checked before any of it is: each bad input is one ``ConfigError``."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rl_lightning.errors import ConfigError
from rl_lightning.results import aggregate, options, runs
from rl_lightning.results.options import Normalise, Reference
from rl_lightning.results.run import Run

_INSTALL = 'pip install -e ".[plot]"'


@dataclass
class Plan:
    """The runs (the user's, then the peers'), what to draw of them and where."""

    runs: list[Run]
    metrics: list[str]
    references: list[Reference]
    normalise: list[Normalise]
    scores: dict[str, np.ndarray]
    size: tuple[int, int]
    out: Path

    @property
    def tasks(self) -> list[str]:
        """The tasks, in the order the user's runs came."""
        return list(dict.fromkeys(str(run.task) for run in self.runs))


def plan(ns: argparse.Namespace) -> Plan:
    """Parse the options, read the runs and check that all of it can be drawn (the namespace of ``plot_cli``)."""
    labels = [options.pair("--label", text, "GLOB", "LABEL") for text in ns.label or []]
    tasks = [options.pair("--task", text, "GLOB", "TASK") for text in ns.task or []]
    references = [options.reference(text) for text in ns.reference or []]
    peers = [options.peer_runs(text) for text in ns.reference_runs or []]
    normalise = [options.normalise(text) for text in ns.normalise or []]
    metrics, size = options.metrics(ns.metric, "eval/episode_return"), options.size(ns.size)
    if not 0 < ns.ci < 1:
        raise ConfigError(f"--ci {ns.ci}: a confidence level between 0 and 1, e.g. --ci 0.95")
    check_installed(aggregate=bool(normalise))
    mine = runs.read(runs.find(ns.runs))
    runs.name_groups(mine, labels)
    runs.name_tasks(mine, tasks)
    known = list(dict.fromkeys(str(run.task) for run in mine))
    for metric in metrics:
        _check_metric(mine, metric, f"--metric {metric}: no run has this tag")
        if getattr(ns, "log_y", False):
            _check_positive(mine, metric)
    for ref in references:
        _task_of("--reference", f"{ref.name}={ref.value:g}", ref.task, known)
    theirs = []
    for peer in peers:
        spec = f"{peer.label}={peer.pattern}"
        found = runs.read(runs.find([peer.pattern], option=f"--reference-runs {peer.label}="))
        for run in found:
            run.group, run.label, run.reference = peer.label, peer.label, True
            run.task = _task_of("--reference-runs", spec, peer.task or run.task, known)
        for metric in metrics:
            _check_metric(found, metric, f"--reference-runs {spec}: its runs have no tag {metric}")
        theirs += found
    scores = aggregate.scores(mine, metrics[0], normalise) if normalise else {}
    return Plan(
        runs=mine + theirs,
        metrics=metrics,
        references=references,
        normalise=normalise,
        scores=scores,
        size=size,
        out=Path(ns.out),
    )


def check_installed(aggregate: bool) -> None:
    """Refuse, in one line, a missing ``plot`` extra: matplotlib always, rliable for an aggregate."""
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(f"plot: matplotlib is not installed; {_INSTALL}")
    if not aggregate:
        return
    if importlib.util.find_spec("rliable") is None:
        raise ConfigError(f"plot --normalise: rliable is not installed; {_INSTALL}")
    try:
        importlib.import_module("rliable.library")
    except (ImportError, TypeError) as err:  # arch 7 (rliable needs arch<8) fails to import under pandas 3
        raise ConfigError(
            f"plot --normalise: rliable does not import ({type(err).__name__}: {err}); "
            f"{_INSTALL} installs versions that work together (pandas<3 for arch 7)"
        ) from None


def _check_metric(group: list[Run], metric: str, problem: str) -> None:
    if not any(metric in run.scalars for run in group):
        tags = sorted({tag for run in group for tag in run.scalars})
        raise ConfigError(f"{problem}; the runs' scalar tags: {', '.join(tags) or '(none)'}")


def _check_positive(group: list[Run], metric: str) -> None:
    """``--log-y`` cannot draw a value at or below 0: refuse it in one line naming the first run that logs one."""
    for run in group:
        series = run.scalars.get(metric)
        finite = np.asarray([] if series is None else series.values, dtype=float)
        finite = finite[np.isfinite(finite)]
        if len(finite) and finite.min() <= 0:
            raise ConfigError(f"--log-y: {run.source} logs {metric} = {finite.min():g}, which a log axis cannot "
                              "show; drop --log-y")  # fmt: skip


def _task_of(option: str, spec: str, task: str | None, known: list[str]) -> str:
    """The task a reference is drawn on: the one it names, else the runs' only task."""
    if task is None and len(known) > 1:
        raise ConfigError(
            f"{option} {spec}: the runs are of {len(known)} tasks ({', '.join(known)}); say which: "
            f"{option} '{spec}@{known[0]}'"
        )
    if task is not None and task not in known:
        raise ConfigError(f"{option} {spec}: task {task} is none of the runs' tasks ({', '.join(known)})")
    return task or known[0]
