"""Drawing a suite and writing its results page: ``rl-lightning plot`` over the committed run summaries, then
``docs/benchmarks/<suite>.md`` built from what it wrote (``summary.json``) and the runs' process records. No number on
the page is typed by hand: each comes from a run's logs or from the suite file (targets, published figures)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from runs import ROOT, finished, process_path, results_root, summary_path
from suite import REPO, Entry, Suite

RANDOM_TAG = "eval/random_episode_return"  # what Evaluation logs for a uniform random policy on the same episodes


def draw_suite(suite: Suite, log: Callable[[str], None]) -> Path | None:
    """Draw every finished run of ``suite`` into ``docs/benchmarks/<suite>/`` and write the page; ``None`` (and
    a line saying so) when no run has finished yet."""
    done = [(e, s) for e in suite.entries for s in e.seeds if finished(suite, e, s)]  # of the current recipes
    if not done:
        log(f"{suite.name}: no finished run to draw yet")
        return None
    docs = ROOT[0] / "docs" / "benchmarks"
    figures = docs / suite.name
    folders, options = [], ["--out", str(figures), "--metric", suite.metric]
    for entry in dict.fromkeys(e for e, _ in done):
        folder = results_root() / suite.name / entry.name
        folders.append(str(folder))
        options += ["--label", f"{folder}/*={entry.legend}"]
        options += [f"--reference={r.label}={r.value:g}@{entry.task}" for r in entry.references]
        if entry.target is not None:  # the bar it is judged by, beside the published figures
            options += [f"--reference=target={entry.target:g}@{entry.task}"]
    command = [sys.executable, "-m", "rl_lightning.cli", "plot", *folders, *options]
    if suite.log_y:
        command.append("--log-y")
    tasks = {e.task for e, _ in done}
    ranges = dict(suite.normalise)
    if suite.normalise_from is not None:
        ranges = random_to_reference(suite, done, log)
    for task, (low, high) in ranges.items():
        if task in tasks:
            command += ["--normalise", f"{task}={low:g}:{high:g}"]
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    table = json.loads((figures / "summary.json").read_text())
    page = docs / f"{suite.name}.md"
    page.write_text(_page(suite, done, table, figures))
    (docs / "index.md").write_text(_index(docs))
    log(f"{suite.name}: {len(done)} run(s) drawn; page {page}")
    return page


def random_to_reference(suite: Suite, done: list[tuple[Entry, int]], log: Callable[[str], None]) -> dict:
    """Each task's score range for the aggregate: from a uniform random policy's return (the median over the task's
    runs of the first ``eval/random_episode_return`` their evaluations logged) to the task's first published figure.
    Empty (and a line saying why) until every entry has every seed finished: rliable's stratified bootstrap needs
    as many runs on each task."""
    finished_seeds = {e.name: sum(x is e for x, _ in done) for e in suite.entries}
    missing = [f"{e.name} {finished_seeds[e.name]} of {len(e.seeds)}" for e in suite.entries
               if finished_seeds[e.name] < len(e.seeds)]  # fmt: skip
    if missing:
        log(f"{suite.name}: the aggregate waits for every run ({', '.join(missing)} seeds finished)")
        return {}
    ranges = {}
    for task in dict.fromkeys(e.task for e in suite.entries):
        entries = [e for e in suite.entries if e.task == task]
        reference = next((r.value for e in entries for r in e.references), None)
        randoms = [
            json.loads(summary_path(suite, e, s).read_text())["scalars"].get(RANDOM_TAG, {}).get("values", [None])[0]
            for e, s in done
            if e in entries
        ]
        if reference is None or None in randoms:
            log(f"{suite.name}: no aggregate: {task} has no published figure or a run without {RANDOM_TAG}")
            return {}
        ranges[task] = (statistics.median(randoms), reference)
    return ranges


def _index(docs: Path) -> str:
    """The results section's front page: each bundled suite, how much of it has run, and how many of its tasks'
    medians meet their targets (from the drawn pages' tables)."""
    from suite import SUITES, load_suite

    lines = [
        "# Benchmarks",
        "",
        "What this trainer reaches, in how long, against the published figures: each suite is a list of bundled",
        "configs, seeds and budgets beside the figures it is compared with (`benchmarks/suites/<suite>.yaml`), run",
        "and drawn by one command, `python benchmarks/suites/run.py <suite>`. A finished run's summary (its curves,",
        "read from its TensorBoard event files) is committed under `benchmarks/results/`, so a suite is never rerun",
        "to redraw it, and every number on these pages is regenerated from those logs. Draw your own runs the same",
        "way with [`rl-lightning plot`](../guides/plots.md).",
        "",
        "| suite | runs finished | task medians at target |",
        "|---|---|---|",
    ]
    for path in sorted(SUITES.glob("*.yaml")):
        suite = load_suite(path.stem)
        total = sum(len(e.seeds) for e in suite.entries)
        ran = sum(finished(suite, e, s) for e in suite.entries for s in e.seeds)
        drawn = docs / suite.name / "summary.json"
        met = "-"
        if drawn.is_file() and (docs / f"{suite.name}.md").is_file():
            groups = {(g["task"], g["group"]): g for g in json.loads(drawn.read_text())["groups"]}
            judged = [
                (e, groups[(e.task, e.legend)])
                for e in suite.entries
                if e.target is not None and (e.task, e.legend) in groups
            ]
            good = sum(
                (g["median"] >= e.target) if suite.higher_is_better else (g["median"] <= e.target) for e, g in judged
            )
            met = f"{good} of {len(judged)} drawn"
        title = f"[{suite.title}]({suite.name}.md)" if (docs / f"{suite.name}.md").is_file() else suite.title
        lines.append(f"| {title} | {ran} of {total} | {met} |")
    return "\n".join(lines) + "\n"


def _page(suite: Suite, done: list[tuple[Entry, int]], table: dict, figures: Path) -> str:
    processes = [json.loads(p.read_text()) for e, s in done if (p := process_path(suite, e, s)).is_file()]
    machines = sorted({p["machine"] for p in processes})
    ended = sorted(seg["ended"][:10] for p in processes for seg in p["segments"])
    lines = [
        f"# {suite.title}",
        "",
        suite.about,
        "",
        "Regenerate (runs what is missing, then redraws this page from the logs' summaries):",
        "",
        f"    python benchmarks/suites/run.py {suite.name}",
        "",
        " ".join(filter(None, [f"Hardware: {', '.join(machines) or 'not recorded'}.", _dates(ended), _load(processes),
                               _speed(processes)]))  # fmt: skip
        if ended
        else "Hardware: not recorded.",
        "",
    ]
    groups = {(g["task"], g["group"]): g for g in table["groups"] if g["metric"] == suite.metric}
    for task in dict.fromkeys(e.task for e in suite.entries):
        entries = [e for e in suite.entries if e.task == task]
        lines += [f"## {task}", ""]
        pngs = sorted(figures.glob(f"{_slug(task)}__*.png"))
        lines += [f"![{task}]({suite.name}/{png.name})" for png in pngs] + [""]
        lines += [
            "| run | config | seeds done | final per seed | median | IQR | target | fit minutes (median, max) |",
            "|---|---|---|---|---:|---:|---|---|",
        ]
        for entry in entries:
            lines.append(_row(suite, entry, groups.get((task, entry.legend)), done))
        references = [r for e in entries for r in e.references]
        if references:
            lines += ["", "Published: " + "; ".join(f"{r.label} **{r.value:g}** ({r.source})" for r in references)]
        lines.append("")
    lines += _aggregate(suite, table, figures)
    lines += _versus_sb3(suite)
    lines += [
        "## Every run",
        "",
        f"Per seed, with wall time and env steps/s from the logs: [summary.md]({suite.name}/summary.md), "
        f"[summary.csv]({suite.name}/summary.csv).",
        "",
    ]
    return "\n".join(lines)


def _aggregate(suite: Suite, table: dict, figures: Path) -> list[str]:
    """The across-tasks section: rliable's IQM of the normalised finals, its interval, and how they were normalised."""
    rows = table.get("aggregate") or []
    if not rows or not (figures / "aggregate.png").is_file():
        return []
    how = (
        "each run's final value as (final - random) / (reference - random), random being a uniform random policy's "
        "return on the same evaluation episodes (the median over the task's runs of the first one their evaluations "
        "logged) and reference each task's first published figure above"
        if suite.normalise_from
        else "each run's final value mapped from the suite file's range per task (low to 0, high to 1)"
    )
    lines = ["## Across tasks", "", f"The interquartile mean (rliable) over all runs and tasks of {how}; the "
             "interval is rliable's stratified bootstrap (runs resampled within each task).", "",
             f"![aggregate]({suite.name}/aggregate.png)", "", "| algorithm | tasks | runs per task | IQM | 95% CI |",
             "|---|---|---|---:|---|"]  # fmt: skip
    lines += [f"| {r['algorithm']} | {len(r['tasks'])} | {r['runs_per_task']} | {r['iqm']:.3f} | "
              f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}] |" for r in rows]  # fmt: skip
    return [*lines, ""]


def _versus_sb3(suite: Suite) -> list[str]:
    """The suite's interleaved timing beside SB3 (``versus_sb3.py``), when one was recorded."""
    record = results_root() / suite.name / "versus_sb3.json"
    if not record.is_file():
        return []
    from versus_sb3 import table

    return [
        "## Time per env step beside SB3",
        "",
        "The recipes above against Stable-Baselines3 with rl-zoo's settings for the same task, whole processes timed "
        "from outside, one after the other in one command (ours, SB3, ours, SB3), ratios pair by pair; ours "
        "includes its evaluations and checkpoints, SB3's run is `model.learn` alone. Regenerate:",
        "",
        "    python benchmarks/suites/versus_sb3.py --peer-python SB3_VENV/bin/python",
        "",
        table(json.loads(record.read_text())),
        "",
    ]


def _dates(ended: list[str]) -> str:
    return f"Runs ended {ended[0]} (UTC)." if ended[0] == ended[-1] else f"Runs ended {ended[0]} to {ended[-1]} (UTC)."


def _speed(processes: list[dict]) -> str:
    """The machine's reference step (``speed_probe.py``) before the fits: the same code on a box k times slower takes
    k times longer, so wall times on one page compare only where these agree."""
    probes = [seg["speed_probe_ms"] for p in processes for seg in p["segments"] if "speed_probe_ms" in seg]
    if not probes:
        return ""
    unrecorded = sum("speed_probe_ms" not in seg for p in processes for seg in p["segments"])
    spread = f"{min(probes):.2f}" if min(probes) == max(probes) else f"{min(probes):.2f} to {max(probes):.2f}"
    text = (f"Machine speed before the fits (benchmarks/suites/speed_probe.py: ms per eager 64x64-MLP gradient step, "
            f"lower is faster): {spread}")  # fmt: skip
    return text + (f"; not recorded for {unrecorded} earlier fits." if unrecorded else ".")


def _load(processes: list[dict]) -> str:
    """The machine's 1-minute load average at the fits' starts and ends: above the core count, other work shared
    the box and the wall times are longer than this trainer's own."""
    loads = [x for p in processes for seg in p["segments"] for x in seg.get("load_average", [])]
    if not loads:
        return ""
    return f"Load average around the fits: median {statistics.median(loads):.1f}, highest {max(loads):.1f}."


def _row(suite: Suite, entry: Entry, group: dict | None, done: list[tuple[Entry, int]]) -> str:
    seeds = [s for e, s in done if e is entry]
    config = f"`{entry.config}`"
    if group is None:
        return f"| {entry.legend} | {config} | 0 of {len(entry.seeds)} | - | - | - | {_target(entry, None)} | - |"
    runs = sorted(group["runs"], key=lambda r: (r["seed"] is None, r["seed"]))
    finals = ", ".join(figure(r["final"]) for r in runs)
    minutes = [
        json.loads(process_path(suite, entry, s).read_text())["wall_s"] / 60
        for s in seeds
        if process_path(suite, entry, s).is_file()
    ]
    fit = f"{statistics.median(minutes):.1f}, {max(minutes):.1f}" if minutes else "-"
    if minutes and entry.minutes is not None:
        fit += f" (bar {entry.minutes:g}: {'met' if max(minutes) <= entry.minutes else '**missed**'})"
    median = group["median"]
    return (
        f"| {entry.legend} | {config} | {len(runs)} of {len(entry.seeds)} | {finals} | {figure(median)} | "
        f"{figure(group['iqr'])} | {_target(entry, [r['final'] for r in runs], suite.higher_is_better)} | {fit} |"
    )


def figure(value: float) -> str:
    """A final value as the tables print it: one decimal from 100 up (returns: 6,309.4), else four significant
    digits, so that an exploitability of 0.0073 or a win rate of 0.36 is not printed as 0.0."""
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.4g}"


def _target(entry: Entry, finals: list[float] | None, higher: bool = True) -> str:
    if entry.target is None:
        return "-"
    if not finals:
        return f"{entry.target:g}"
    reached = sum((f >= entry.target) if higher else (f <= entry.target) for f in finals)
    median = statistics.median(finals)
    met = median >= entry.target if higher else median <= entry.target
    return f"{entry.target:g}: median {'met' if met else '**missed**'}, {reached} of {len(finals)} seeds"


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.") or "run"
