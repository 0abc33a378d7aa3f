"""A benchmark suite: what to run (bundled configs x seeds at a budget) and what to compare it with (published figures
with their sources), read from ``benchmarks/suites/<name>.yaml`` and checked before any run starts.

A suite file::

    title: PPO on MuJoCo v5, 1M env steps
    metric: eval/episode_return          # the TensorBoard tag drawn and tabled
    x: env steps                         # or "wall time" for suites judged against the clock
    log_y: false                         # the metric on a log axis (exploitability spans decades)
    about: one paragraph for the results page
    entries:
      - name: ppo_hopper                 # the run folder and the label in plots (unique)
        config: configs/ppo_hopper.yaml
        task: Hopper-v5                  # runs of one task share a figure
        seeds: [0, 1, 2]
        env_steps: 1000000               # passed as --data.init_args.total_env_steps
        args: []                         # more CLI overrides, as on the command line
        target: 2400                     # the acceptance bar for the median of the final values
        minutes: 20                      # the wall-time bar for each fit (whole process)
        references:
          - {label: "rl-zoo (v3, 1 run)", value: 2410, source: "DLR-RM/rl-baselines3-zoo benchmark.md"}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "benchmarks" / "suites"


class SuiteError(ValueError):
    """A suite file that cannot be run as written: the message names the suite, the entry and the field."""


@dataclass(frozen=True)
class Reference:
    """A published figure to draw beside a task's runs."""

    label: str
    value: float
    source: str


@dataclass(frozen=True)
class Entry:
    """One bundled config run at ``seeds`` for ``env_steps``, with the bars it is judged by."""

    name: str
    config: str
    task: str
    seeds: tuple[int, ...]
    env_steps: int | None
    args: tuple[str, ...] = ()
    target: float | None = None
    minutes: float | None = None
    references: tuple[Reference, ...] = ()
    label: str | None = None  # the legend label; the name when unset

    @property
    def legend(self) -> str:
        return self.label or self.name

    @property
    def fragments(self) -> list[str]:
        """The config files ``args`` adds (``--config PATH`` or ``--config=PATH``; paths from the repository root):
        their settings are part of the recipe."""
        args, paths = list(self.args), []
        for index, arg in enumerate(args):
            if arg == "--config" and index + 1 < len(args):
                paths.append(args[index + 1])
            elif arg.startswith("--config="):
                paths.append(arg.split("=", 1)[1])
        return paths


RANDOM_TO_REFERENCE = "random_to_reference"


@dataclass(frozen=True)
class Suite:
    """A suite file, checked."""

    name: str
    title: str
    metric: str
    entries: tuple[Entry, ...]
    x: str = "env steps"
    about: str = ""
    higher_is_better: bool = True
    log_y: bool = False
    normalise: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: ``random_to_reference``: each task's range from its runs' logged random return to its first published figure
    normalise_from: str | None = None

    def entry(self, name: str) -> Entry:
        for entry in self.entries:
            if entry.name == name:
                return entry
        raise SuiteError(f"suite {self.name!r} has no entry {name!r}: it has {', '.join(e.name for e in self.entries)}")


def load_suite(name: str, path: Path | None = None) -> Suite:
    """The suite ``benchmarks/suites/<name>.yaml`` (or the file ``path``); a ``SuiteError`` naming the field for
    anything malformed."""
    path = SUITES / f"{name}.yaml" if path is None else path
    if not path.is_file():
        known = sorted(p.stem for p in SUITES.glob("*.yaml"))
        raise SuiteError(f"no suite {name!r}: benchmarks/suites/ has {', '.join(known)}")
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict):
        raise SuiteError(f"suite {name!r}: {path.name} must be a mapping with title, metric and entries")
    entries = tuple(_entry(name, index, item) for index, item in enumerate(_required(name, raw, "entries", list)))
    names = [entry.name for entry in entries]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise SuiteError(f"suite {name!r}: entry names must be unique, {', '.join(doubled)} repeats")
    x = str(raw.get("x", "env steps"))
    if x not in ("env steps", "wall time"):
        raise SuiteError(f"suite {name!r}: x={x!r} must be 'env steps' or 'wall time'")
    raw_normalise = raw.get("normalise") or {}
    normalise_from = None
    if isinstance(raw_normalise, str):
        if raw_normalise != RANDOM_TO_REFERENCE:
            raise SuiteError(f"suite {name!r}: normalise={raw_normalise!r} must be {RANDOM_TO_REFERENCE!r} or a "
                             "mapping of task to [low, high]")  # fmt: skip
        normalise_from, raw_normalise = raw_normalise, {}
    normalise = {str(task): _pair(name, task, bounds) for task, bounds in raw_normalise.items()}
    return Suite(
        name=name,
        title=str(_required(name, raw, "title", str)),
        metric=str(_required(name, raw, "metric", str)),
        entries=entries,
        x=x,
        about=str(raw.get("about", "")).strip(),
        higher_is_better=bool(raw.get("higher_is_better", True)),
        log_y=bool(raw.get("log_y", False)),
        normalise=normalise,
        normalise_from=normalise_from,
    )


def _required(suite: str, raw: dict[str, Any], key: str, kind: type) -> Any:
    if key not in raw:
        raise SuiteError(f"suite {suite!r}: missing {key!r}")
    if not isinstance(raw[key], kind):
        raise SuiteError(f"suite {suite!r}: {key!r} must be a {kind.__name__}, got {type(raw[key]).__name__}")
    return raw[key]


def _entry(suite: str, index: int, raw: Any) -> Entry:
    where = f"suite {suite!r}, entry {index}"
    if not isinstance(raw, dict):
        raise SuiteError(f"{where}: must be a mapping with name, config, task and seeds")
    unknown = sorted(set(raw) - set(Entry.__dataclass_fields__))
    if unknown:
        raise SuiteError(f"{where}: unknown field(s) {', '.join(unknown)}")
    for key in ("name", "config", "task", "seeds"):
        if key not in raw:
            raise SuiteError(f"{where}: missing {key!r}")
    config = str(raw["config"])
    if not (REPO / config).is_file():
        raise SuiteError(f"{where} ({raw['name']}): config {config!r} does not exist (a path from the repository root)")
    seeds = raw["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise SuiteError(f"{where} ({raw['name']}): seeds must be a non-empty list of integers, got {seeds!r}")
    references = tuple(
        Reference(str(r["label"]), float(r["value"]), str(r["source"])) for r in raw.get("references", []) or []
    )
    entry = Entry(
        name=str(raw["name"]),
        config=config,
        task=str(raw["task"]),
        seeds=tuple(seeds),
        env_steps=None if raw.get("env_steps") is None else int(raw["env_steps"]),
        args=tuple(str(a) for a in raw.get("args", []) or []),
        target=None if raw.get("target") is None else float(raw["target"]),
        minutes=None if raw.get("minutes") is None else float(raw["minutes"]),
        references=references,
        label=raw.get("label"),
    )
    for fragment in entry.fragments:
        if not (REPO / fragment).is_file():
            raise SuiteError(f"{where} ({entry.name}): args adds --config {fragment!r}, which does not exist (a path "
                             "from the repository root)")  # fmt: skip
    return entry


def _pair(suite: str, task: str, bounds: Any) -> tuple[float, float]:
    if not (isinstance(bounds, list) and len(bounds) == 2):
        raise SuiteError(f"suite {suite!r}: normalise.{task} must be [low, high] (a random score and a reference)")
    return float(bounds[0]), float(bounds[1])
