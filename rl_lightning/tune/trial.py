"""One tuning trial: its seeds' fits as ``rl-lightning fit`` processes side by side, reported and pruned together.

Processes rather than in-process fits: a crashing or diverging config fails only its trial, every config,
algorithm and backend tunes exactly as ``fit`` runs it (threads, seeds and globals start clean), trials of several
``--n_jobs`` use several cores, and a killed worker takes its fits with it (Linux: a parent-death SIGTERM). Each is
forked from a server that imported the CLI once (``fit_process.py``), so a fit starts without ~4 s of imports.
"""

from __future__ import annotations

import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_lightning.processes import stop
from rl_lightning.tune.config import to_yaml, trial_config
from rl_lightning.tune.fit_process import FitProcess
from rl_lightning.tune.report import read_reports

POLL_S = 0.2


class Pruned(Exception):
    """The pruner stopped the trial at report ``step`` (env steps or updates, rounded to the evaluation cadence)."""

    def __init__(self, step: int) -> None:
        super().__init__(f"pruned at step {step}")
        self.step = step


class FitFailed(Exception):
    """A seed's fit exited non-zero; the message is its last error line."""


@dataclass
class Seeds:
    """The running fits of one trial and what they reported so far."""

    processes: list[FitProcess]
    report_paths: list[Path]
    logs: list[Path]
    curves: list[list[dict[str, float]]] = field(default_factory=list)
    reported_steps: set[int] = field(default_factory=set)


def run_trial(trial: Any, study_dir: Path, config: dict[str, Any], settings: Any, heartbeat: Any) -> float:
    """Run ``trial`` (an Optuna trial with its params): its seeds' fits, reports, pruning; return its objective.

    ``settings`` holds ``seeds_per_trial``, ``objective``, ``last_k`` and ``base_seed``; ``heartbeat()`` is called
    at every poll (it records the trial's heartbeat at the storage's interval). Raises ``Pruned``, ``FitFailed``
    or ``stop.Interrupted`` (after ending the fits).
    """
    name = f"trial_{trial.number:04d}"
    seeds = _start(trial.params, trial.number, study_dir, name, config, settings)
    trial.set_user_attr("run_dir", str(study_dir / name))
    try:
        _follow(trial, seeds, heartbeat)
    finally:
        _end(seeds.processes)
    values = [objective(curve, settings.objective, settings.last_k) for curve in seeds.curves]
    trial.set_user_attr("seed_values", values)
    return sum(values) / len(values)


def _start(params: dict[str, Any], number: int, study_dir: Path, name: str, config: dict[str, Any], s: Any) -> Seeds:
    processes, reports, logs = [], [], []
    for index in range(s.seeds_per_trial):
        version = f"seed_{index}"
        run_dir = study_dir / name / version
        run_dir.mkdir(parents=True, exist_ok=True)
        report = run_dir / "evaluations.jsonl"
        report.unlink(missing_ok=True)
        seed = s.base_seed + index
        fit = trial_config(config, params, seed, str(study_dir), name, version, str(report))
        (run_dir / "fit_config.yaml").write_text(to_yaml(fit))
        log = run_dir / "output.log"
        processes.append(FitProcess(["fit", "--config", str(run_dir / "fit_config.yaml")], log))
        reports.append(report)
        logs.append(log)
    return Seeds(processes, reports, logs, curves=[[] for _ in processes])


def _follow(trial: Any, seeds: Seeds, heartbeat: Any) -> None:
    """Poll the fits until all exit: report each env step all seeds have reached, prune, raise on failure."""
    while True:
        heartbeat()
        stop.check()
        done = [p.poll() is not None for p in seeds.processes]
        for index, path in enumerate(seeds.report_paths):
            seeds.curves[index] = read_reports(path)
        _report_complete_steps(trial, seeds, done)
        for process, log in zip(seeds.processes, seeds.logs):
            if process.poll() not in (None, 0):
                raise FitFailed(_last_error(log, process.returncode))
        if all(done):
            return
        time.sleep(POLL_S)


def _step(record: dict[str, float]) -> int:
    """Where an evaluation is reported: its ``step`` (the counter rounded down to the evaluation cadence, shared by
    trials of any rollout size: ``report.TrialReport``)."""
    return int(record.get("step", record["env_steps"]))


def _report_complete_steps(trial: Any, seeds: Seeds, done: list[bool]) -> None:
    """Report the seed mean at each step every seed has reported (or ended before); prune if told.

    A seed with two evaluations at one step (the end-of-training evaluation rounded down onto the last cadence
    evaluation's step) counts the first."""
    steps = sorted({_step(r) for curve in seeds.curves for r in curve} - seeds.reported_steps)
    for step in steps:
        values = []
        for curve, finished in zip(seeds.curves, done):
            at = [r["value"] for r in curve if _step(r) == step][:1]
            reached = at or finished or (curve and _step(curve[-1]) > step)
            if not reached:
                return
            values += at
        seeds.reported_steps.add(step)
        finite = [v for v in values if math.isfinite(v)]
        if not finite:
            continue
        trial.report(sum(finite) / len(finite), step)
        if trial.should_prune():
            raise Pruned(step)


def objective(curve: list[dict[str, float]], kind: str, last_k: int) -> float:
    """A seed's objective from its evaluations: the mean of the last ``last_k``, or the area under the curve over
    env steps divided by their span (the mean return over training; one evaluation: its value)."""
    points = [(r["env_steps"], r["value"]) for r in curve]
    if not points:
        return math.nan
    if kind == "last_k":
        tail = [v for _, v in points[-last_k:]]
        return sum(tail) / len(tail)
    if len(points) == 1:
        return points[0][1]
    area = sum((x1 - x0) * (y0 + y1) / 2 for (x0, y0), (x1, y1) in zip(points, points[1:]))
    return area / (points[-1][0] - points[0][0])


def _end(processes: list[FitProcess]) -> None:
    """SIGTERM fits still running (they stop within one env step), SIGKILL any left after 30 s."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            process.kill()
            process.wait()


def _last_error(log: Path, code: int) -> str:
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    errors = [line for line in lines if line.startswith("rl-lightning: error:")]
    tail = errors[-1] if errors else (lines[-1] if lines else "")
    return f"fit exited with code {code}: {tail.strip()[:500]} (log: {log})"
