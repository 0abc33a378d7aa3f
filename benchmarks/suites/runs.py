"""Running a suite's fits: one ``rl-lightning fit`` subprocess per (entry, seed), resumed from its ``last.ckpt`` when a
fit was cut short, skipped when its summary is already committed.

Layout (from the repository root):

- ``benchmarks/runs/<suite>/<entry>/seed<S>/``: the fit's TensorBoard folder and checkpoints (ignored by git);
- ``benchmarks/results/<suite>/<entry>/seed<S>.json``: the run's summary (its curves, read from its event files by
  ``rl-lightning plot --write-summaries``), committed: a finished run is never rerun;
- ``benchmarks/results/<suite>/<entry>/seed<S>.process.json``: how the fit ran (command, wall and CPU seconds of the
  whole process, its segments when resumed, the machine and its speed just before (``speed_probe.py``), the date).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from speed_probe import reference_step_ms
from suite import REPO, Entry, Suite
from tree_cpu import TreeCPU

#: Where runs, results and the pages go: the repository, unless ``--root`` (the tests) says otherwise.
ROOT = [REPO]


def runs_root() -> Path:
    return ROOT[0] / "benchmarks" / "runs"


def results_root() -> Path:
    return ROOT[0] / "benchmarks" / "results"


def run_dir(suite: Suite, entry: Entry, seed: int) -> Path:
    return runs_root() / suite.name / entry.name / f"seed{seed}"


def summary_path(suite: Suite, entry: Entry, seed: int) -> Path:
    return results_root() / suite.name / entry.name / f"seed{seed}.json"


def process_path(suite: Suite, entry: Entry, seed: int) -> Path:
    return results_root() / suite.name / entry.name / f"seed{seed}.process.json"


def fit_command(suite: Suite, entry: Entry, seed: int) -> list[str]:
    """The fit as a user would type it (``rl-lightning fit ...``, from the repository root), logging to the
    suite's run folder."""
    command = ["rl-lightning", "fit", "--config", entry.config, "--seed_everything", str(seed)]
    if entry.env_steps is not None:
        command += ["--data.init_args.total_env_steps", str(entry.env_steps)]
    command += [
        "--trainer.logger.init_args.save_dir",
        _shown(runs_root() / suite.name),
        "--trainer.logger.init_args.name",
        entry.name,
        "--trainer.logger.init_args.version",
        f"seed{seed}",
        *entry.args,
    ]
    return command


def recipe_digest(entry: Entry) -> str:
    """What a run of ``entry`` was made from: its config's settings (parsed: its comments, where the measured
    figures are written down, do not count), its budget and its extra arguments. A run whose recorded digest
    differs was made from another recipe and is run again."""
    settings = yaml.safe_load((REPO / entry.config).read_text())
    fragments = [yaml.safe_load((REPO / path).read_text()) for path in entry.fragments]
    text = json.dumps([settings, entry.env_steps, list(entry.args), *fragments], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def finished(suite: Suite, entry: Entry, seed: int) -> bool:
    """Whether the run has a committed summary made from the entry's current recipe (its process record names the
    recipe's digest; a summary without one is of unknown make and is fitted again)."""
    if not summary_path(suite, entry, seed).is_file():
        return False
    record = process_path(suite, entry, seed)
    made_from = json.loads(record.read_text()).get("recipe_digest") if record.is_file() else None
    return made_from is not None and made_from == recipe_digest(entry)


def forget(suite: Suite, entry: Entry, seed: int, log) -> None:
    """Remove a run made from an older recipe (its summary, process record and run folder; git keeps the old
    summary), so that it is fitted afresh rather than resumed."""
    log(f"{entry.name} seed {seed}: {entry.config} or the entry changed since this run: fitting it again")
    summary_path(suite, entry, seed).unlink(missing_ok=True)
    process_path(suite, entry, seed).unlink(missing_ok=True)
    shutil.rmtree(run_dir(suite, entry, seed), ignore_errors=True)


#: The file in a run folder naming the recipe its checkpoints were made from.
RECIPE_MARKER = "recipe.digest"


def resumable(suite: Suite, entry: Entry, seed: int, log) -> Path | None:
    """The run folder's ``last.ckpt`` to resume from, if its checkpoints were made from the entry's current recipe;
    a folder of another recipe (or of unknown make) is removed, so that the fit starts afresh instead of resuming
    weights, budget and optimiser made under other settings."""
    folder = run_dir(suite, entry, seed)
    found = last_checkpoint(folder)
    if found is None:
        return None
    marker = folder / RECIPE_MARKER
    if marker.is_file() and marker.read_text().strip() == recipe_digest(entry):
        return found
    log(f"{entry.name} seed {seed}: {_shown(folder)} holds a run of another recipe: fitting it afresh")
    shutil.rmtree(folder)
    return None


def last_checkpoint(folder: Path) -> Path | None:
    found = sorted(folder.glob("**/last.ckpt"))
    return found[0] if found else None


def machine() -> str:
    """The CPU model and core count, as the results page names the hardware."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def fit(suite: Suite, entry: Entry, seed: int, log) -> bool:
    """Run (or resume) one fit in a subprocess; ``True`` once it ended 0. Its console goes to ``fit.log`` beside
    its events; its process record is written either way (a cut-short segment is kept for the next resume)."""
    folder = run_dir(suite, entry, seed)
    resume = resumable(suite, entry, seed, log)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RECIPE_MARKER).write_text(recipe_digest(entry) + "\n")
    command = fit_command(suite, entry, seed)
    if resume is not None:
        command += ["--ckpt_path", _shown(resume)]
    record_path = process_path(suite, entry, seed)
    record = json.loads(record_path.read_text()) if record_path.is_file() and resume is not None else {"segments": []}
    log(f"{entry.name} seed {seed}: {'resuming' if resume else 'starting'}: {' '.join(command)}")
    probe_ms = reference_step_ms()  # the machine's speed just before the fit (speed_probe.py)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()[0]
    start = time.monotonic()
    with open(folder / "fit.log", "a") as console:
        code, tree_cpu = _run_to_the_end([sys.executable, "-m", "rl_lightning.cli", *command[1:]], console)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record["segments"].append(
        {
            "command": " ".join(command),
            "exit_code": code,
            "wall_s": round(wall, 1),
            "cpu_user_s": round(after.ru_utime - before.ru_utime, 1),
            "cpu_system_s": round(after.ru_stime - before.ru_stime, 1),
            "cpu_tree_s": tree_cpu,  # every process of the fit, actors included (tree_cpu.py); rusage misses those
            "ended": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],  # 1-minute, at start and end
            "speed_probe_ms": probe_ms,
        }
    )
    record.update(
        machine=machine(),
        python=sys.version.split()[0],
        wall_s=round(sum(s["wall_s"] for s in record["segments"]), 1),
        cpu_s=round(sum(_segment_cpu(s) for s in record["segments"]), 1),
        resumed=len(record["segments"]) > 1,
        recipe_digest=recipe_digest(entry),
    )
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    log(f"{entry.name} seed {seed}: exit {code} after {wall:.0f} s (see {_shown(folder)}/fit.log)")
    return code == 0


def _segment_cpu(segment: dict) -> float:
    """A segment's CPU seconds: its process tree's where sampled, else the rusage of the processes waited for."""
    tree = segment.get("cpu_tree_s")
    return tree if tree is not None else segment["cpu_user_s"] + segment["cpu_system_s"]


def _shown(path: Path) -> str:
    """``path`` from the repository root when it lies in it (as the command is typed there), else absolute."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def _run_to_the_end(command: list[str], console) -> tuple[int, float | None]:
    """Run the fit and wait for it; its exit code and its process tree's CPU seconds. A SIGTERM or Ctrl+C of this
    script is passed on to the fit, which then saves its fault checkpoint and stops (the next run of the suite
    resumes from it), and is awaited: no fit outlives the suite's command."""
    child = subprocess.Popen(command, cwd=REPO, stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
    cpu = TreeCPU(child.pid, interval=0.5)  # a sample costs ~1.3 ms of CPU; a fit lasts minutes
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    try:
        code = child.wait()
        return code, cpu.stop()
    except KeyboardInterrupt:
        child.send_signal(signal.SIGTERM)
        child.wait()
        raise
    finally:
        cpu.stop()
        signal.signal(signal.SIGTERM, previous)
        if child.poll() is None:  # anything else that went wrong here
            child.kill()
            child.wait()


#: The tags a committed summary keeps: what the pages draw and what a reader checks a curve with.
KEPT_TAGS = (
    "eval/", "rollout/", "perf/env_sps", "policy/lag", "train/entropy", "train/approx_kl", "train/clip_fraction",
)  # fmt: skip
#: Points kept of a per-update series (the first and the last always): a 1M-step run logs thousands.
MAX_POINTS = 300


def compact(path: Path) -> Path:
    """Keep only ``KEPT_TAGS`` in the summary at ``path``, and at most ``MAX_POINTS`` evenly spaced points of each
    (evaluations are a few dozen, kept whole): a run's summary stays tens of kilobytes in git."""
    data = json.loads(path.read_text())
    kept = {}
    for tag, series in data["scalars"].items():
        if not tag.startswith(KEPT_TAGS):
            continue
        count = len(series["steps"])
        if count > MAX_POINTS:
            picks = sorted({round(i * (count - 1) / (MAX_POINTS - 1)) for i in range(MAX_POINTS)})
            series = {key: [values[i] for i in picks] for key, values in series.items()}
        kept[tag] = series
    data["scalars"] = kept
    path.write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n")
    return path


def summarise(suite: Suite, entry: Entry, seed: int) -> Path:
    """Write the finished run's summary JSON from its event files (``rl_lightning.results.summary``, the format
    ``rl-lightning plot`` reads like an event folder)."""
    from rl_lightning.results.summary import write_summary

    path = compact(write_summary(run_dir(suite, entry, seed), summary_path(suite, entry, seed)))
    task = json.loads(path.read_text())["task"]
    if task != entry.task:  # the page finds a run's row by its task: a mismatch would leave it out
        path.unlink()
        raise SystemExit(f"suite {suite.name!r}, entry {entry.name}: task {entry.task!r} in the suite file, but the "
                         f"run's config plays {task!r}; write task: {task!r}")  # fmt: skip
    return path
