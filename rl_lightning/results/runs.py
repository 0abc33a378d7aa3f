"""Find the runs under the paths and globs a user names, read them, and name each run's task and group.

A run is a TensorBoard run folder (a folder that holds ``events.out.tfevents.*`` files itself, e.g.
``runs/ppo/version_0``: one seed) or a run summary JSON (``summary``). A folder is searched all the way down.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from fnmatch import fnmatch
from pathlib import Path, PurePath

from rl_lightning.errors import ConfigError
from rl_lightning.results.events import EVENTS_PREFIX, has_events, read_run
from rl_lightning.results.run import Run
from rl_lightning.results.summary import read_summary

#: The head of a summary file, enough to tell one from other JSON met in a folder (``"format"`` is written first).
_SUMMARY_MARK = b"rl_lightning.run_summary/"


def find(patterns: Sequence[str], option: str = "") -> list[tuple[str, Path]]:
    """``(source, path)`` of every run under ``patterns``, in order, each once; a pattern with none is refused (its
    message starts with ``option`` and the pattern)."""
    found: dict[Path, str] = {}
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        if not any(os.path.exists(match) for match in matches):
            raise ConfigError(f"{option}{pattern}: no such file or folder")
        runs = [run for match in matches for run in _runs_at(Path(match))]
        if not runs:
            raise ConfigError(
                f"{option}{pattern}: no TensorBoard event files ({EVENTS_PREFIX}*) or run summaries (*.json) under it"
            )
        for path in runs:
            found.setdefault(path.resolve(), str(path))
    return [(source, path) for path, source in found.items()]


def read(found: Sequence[tuple[str, Path]]) -> list[Run]:
    """Read each run ``find`` found: event folders with TensorBoard's loader, summaries from their JSON."""
    return [read_summary(path, source) if path.is_file() else read_run(path, source) for source, path in found]


def _runs_at(path: Path) -> list[Path]:
    if path.is_file():
        if path.name.startswith(EVENTS_PREFIX):
            return [path.parent]
        if path.suffix == ".json":
            return [path]  # named on purpose: read_summary refuses it in one line if it is not a summary
        raise ConfigError(f"{path}: neither a TensorBoard run folder, an event file nor a run summary .json")
    runs = []
    for folder, subfolders, files in os.walk(path):
        subfolders.sort()
        here = Path(folder)
        if has_events(here):
            runs.append(here)
        runs.extend(here / name for name in sorted(files) if name.endswith(".json") and _is_summary(here / name))
    return runs


def _is_summary(path: Path) -> bool:
    with open(path, "rb") as file:
        return _SUMMARY_MARK in file.read(256)


def matches(run: Run, pattern: str) -> bool:
    """Whether ``pattern`` (a glob) matches the run's path or a folder above it, as found or made absolute."""
    for path in (PurePath(run.source), PurePath(os.path.abspath(run.source))):
        if any(fnmatch(str(candidate), pattern) for candidate in (path, *path.parents)):
            return True
    return False


def name_groups(runs: Sequence[Run], labels: Sequence[tuple[str, str]]) -> None:
    """Set each run's group: the first ``(glob, label)`` matching it, else the label its summary carries, else its
    config's name (with the config's digest appended where runs of one name have different configs)."""
    for run in runs:
        label = next((name for pattern, name in labels if matches(run, pattern)), None) or run.label
        run.label = label
    digests: dict[str, set[str]] = {}
    for run in runs:
        if run.label is None:
            digests.setdefault(run.config, set()).add(run.digest)
    for run in runs:
        if run.label is not None:
            run.group = run.label
        else:
            run.group = run.config if len(digests[run.config]) == 1 else f"{run.config}#{run.digest[:6]}"


def name_tasks(runs: Sequence[Run], tasks: Sequence[tuple[str, str]]) -> None:
    """Set ``--task GLOB=TASK`` on the runs it matches; refuse a mix of runs with and without a task.

    Runs of several tasks are drawn one figure per task. A run whose task nothing names (no ``config.yaml``) among
    runs of known tasks cannot be placed, so it is refused; when no run names its task, all are one task,
    ``unknown``.
    """
    for run in runs:
        run.task = next((task for pattern, task in tasks if matches(run, pattern)), None) or run.task
    known = sorted({run.task for run in runs if run.task is not None})
    unknown = [run.source for run in runs if run.task is None]
    if unknown and known:
        raise ConfigError(
            f"{unknown[0]}: nothing names its task (no config.yaml) and the other runs are of "
            f"{', '.join(known)}; say which with --task '{unknown[0]}=TASK'"
        )
    for run in runs:
        run.task = run.task or "unknown"
