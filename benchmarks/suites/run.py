"""Run a benchmark suite, then draw it: ``python benchmarks/suites/run.py SUITE``.

    python benchmarks/suites/run.py mujoco                     # every missing run, then the plots and the page
    python benchmarks/suites/run.py mujoco --only ppo_hopper   # one entry (its missing seeds)
    python benchmarks/suites/run.py classic --draw             # no fits: redraw from the committed summaries
    python benchmarks/suites/run.py mujoco --list              # what is done and what is missing

A suite (``benchmarks/suites/<name>.yaml``, read by ``suite.py``) lists bundled configs, seeds, budgets and the
published figures to compare with. Each missing run is one ``rl-lightning fit`` subprocess (``runs.py``), one after
another (two at once would halve each other's speed and spoil the wall times); a run cut short resumes from its
``last.ckpt``; a run whose summary is committed under ``benchmarks/results/`` is never rerun. Drawing reads only
those summaries (``rl-lightning plot``) and writes the figures and the results page ``docs/benchmarks/<suite>.md``
(``page.py``): every number on it comes from the logs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # suite.py, runs.py, page.py beside this file

from page import draw_suite  # noqa: E402
from runs import ROOT, finished, fit, forget, summarise, summary_path  # noqa: E402
from suite import SuiteError, load_suite  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/suites/run.py", description=__doc__.splitlines()[0])
    parser.add_argument("suite", help="a suite in benchmarks/suites/ (classic, mujoco, ...)")
    parser.add_argument("--only", nargs="+", default=None, help="entry names to run (default: all)")
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=None, help="e.g. 0,1")
    parser.add_argument("--draw", action="store_true", help="no fits: draw from the committed summaries")
    parser.add_argument("--list", action="store_true", help="say which runs are done and which are missing")
    parser.add_argument("--no-draw", action="store_true", help="run, but leave the drawing for later")
    parser.add_argument("--suite-file", type=Path, default=None, help="a suite file elsewhere (tests)")
    parser.add_argument("--root", type=Path, default=None, help="write benchmarks/runs, benchmarks/results and "
                        "docs/benchmarks under this folder instead of the repository (tests)")
    args = parser.parse_args(argv)
    if args.root is not None:
        ROOT[0] = args.root.resolve()
    try:
        suite = load_suite(args.suite, args.suite_file)
        entries = [suite.entry(name) for name in args.only] if args.only else list(suite.entries)
    except SuiteError as err:
        print(f"benchmarks/suites/run.py: {err}", file=sys.stderr)
        return 2
    todo = [
        (entry, seed)
        for entry in entries
        for seed in entry.seeds
        if (args.seeds is None or seed in args.seeds) and not finished(suite, entry, seed)
    ]
    if args.list:
        for entry in entries:
            done = [s for s in entry.seeds if finished(suite, entry, s)]
            print(f"{entry.name}: done seeds {done or '-'}, missing {[s for s in entry.seeds if s not in done] or '-'}")
        return 0
    failed = []
    if not args.draw:
        try:
            for entry, seed in todo:
                if summary_path(suite, entry, seed).is_file():  # made from an older recipe
                    forget(suite, entry, seed, log=_say)
                if fit(suite, entry, seed, log=_say):
                    summarise(suite, entry, seed)
                else:
                    failed.append(f"{entry.name} seed {seed}")
        except KeyboardInterrupt:  # Ctrl+C or SIGTERM: the fit under way saved its checkpoint and stopped
            _say("stopped; the same command resumes the run that was cut short and runs the rest")
            return 130
    if not args.no_draw:
        draw_suite(suite, log=_say)
    if failed:
        _say(f"{len(failed)} run(s) did not finish: {', '.join(failed)}; run the same command again to resume them")
        return 1
    return 0


def _say(line: str) -> None:
    print(f"[suite] {line}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
