"""Wall and CPU time per env step of the MuJoCo suite's recipes beside Stable-Baselines3 with rl-zoo's settings for
the same task, measured in one command, the two interleaved run by run (ours, SB3, ours, SB3, ...) so that a drift in
the machine's speed falls on both.

    python benchmarks/suites/versus_sb3.py --peer-python SB3_VENV/bin/python [--tasks halfcheetah,walker2d]
        [--env-steps 50000] [--pairs 2]

SB3's venv: ``python -m venv V; V/bin/pip install torch==2.13.0; V/bin/pip install stable-baselines3
"gymnasium[mujoco]"``. Each run is a whole process timed from outside (start-up, env creation and, for ours, the
recipe's own evaluations and checkpoints included; SB3's ``sb3_ppo.py train`` runs ``model.learn`` alone); CPU
seconds are the process tree's user + system time, sampled from ``/proc`` (``tree_cpu.py``). Results:
``benchmarks/results/mujoco/versus_sb3.json`` (read by the MuJoCo page) and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runs import machine
from suite import REPO
from tree_cpu import TreeCPU

#: Task -> (our bundled recipe, the SB3 peer script's env name). rl-zoo's settings live in ``sb3_ppo.py``.
TASKS = {
    "halfcheetah": ("configs/ppo_halfcheetah_async.yaml", "HalfCheetah-v5"),
    "walker2d": ("configs/ppo_walker2d.yaml", "Walker2d-v5"),
}
PEER = REPO / "benchmarks" / "peers" / "sb3_ppo.py"
OUT = REPO / "benchmarks" / "results" / "mujoco" / "versus_sb3.json"


def timed(command: list[str], log: Path) -> dict[str, float]:
    """Run ``command`` to its end (its console to ``log``); its wall seconds and its process tree's CPU seconds
    (``tree_cpu.TreeCPU``: our actors are forked by a fork server nobody waits for, so rusage would miss them)."""
    start = time.perf_counter()
    with log.open("w") as console:
        child = subprocess.Popen(command, cwd=REPO, stdout=console, stderr=subprocess.STDOUT)
        sampler = TreeCPU(child.pid)
        code = child.wait()
        cpu = sampler.stop()
    wall = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"versus_sb3: {' '.join(command[:4])} ... exited {code}; its console: {log}")
    return {"wall_s": round(wall, 2), "cpu_s": cpu}


def ours(config: str, env_steps: int, seed: int, folder: Path) -> list[str]:
    return [
        sys.executable, "-m", "rl_lightning.cli", "fit", "--config", config, "--seed_everything", str(seed),
        "--data.init_args.total_env_steps", str(env_steps), "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(folder), "--trainer.logger.init_args.name", f"seed{seed}",
    ]  # fmt: skip


def peer(python: str, env: str, env_steps: int, seed: int) -> list[str]:
    return [python, str(PEER), "train", "--env", env, "--total-env-steps", str(env_steps), "--seed", str(seed)]


def measure(args: argparse.Namespace) -> dict:
    rows = []
    with tempfile.TemporaryDirectory(prefix="versus_sb3_") as scratch:
        for task in args.tasks:
            config, _ = TASKS[task]
            for seed in range(args.pairs):
                mine = timed(ours(config, args.env_steps, seed, Path(scratch) / task), Path(scratch) / "ours.log")
                theirs = timed(peer(args.peer_python, task, args.env_steps, seed), Path(scratch) / "sb3.log")
                rows.append({"task": task, "seed": seed, "ours": mine, "sb3": theirs})
                print(f"[versus_sb3] {task} seed {seed}: ours {mine}, SB3 {theirs}", flush=True)
    return {
        "env_steps": args.env_steps, "machine": machine(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "load_average_after": round(os.getloadavg()[0], 2), "recipes": {t: TASKS[t][0] for t in args.tasks},
        "rows": rows,
    }  # fmt: skip


def table(result: dict) -> str:
    """Per task: the medians of each side's wall and CPU seconds and of the pairs' ratios (ours / SB3)."""
    lines = [
        f"{result['env_steps']:,} env steps a run, {len({r['seed'] for r in result['rows']})} interleaved pairs "
        f"per task, {result['machine']}, {result['date']}.",
        "",
        "| task | our recipe | ours: wall s | SB3 (rl-zoo settings): wall s | wall ratio | ours: CPU s | SB3: CPU s | "
        "CPU ratio | ours: wall µs per env step |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for task, recipe in result["recipes"].items():
        rows = [r for r in result["rows"] if r["task"] == task]

        def median(side: str, key: str) -> float:
            return statistics.median(r[side][key] for r in rows)

        def ratio(key: str) -> float:
            return statistics.median(r["ours"][key] / r["sb3"][key] for r in rows)

        per_step = median("ours", "wall_s") / result["env_steps"] * 1e6
        lines.append(
            f"| {TASKS[task][1]} | `{recipe}` | {median('ours', 'wall_s'):.1f} | {median('sb3', 'wall_s'):.1f} | "
            f"{ratio('wall_s'):.2f}x | {median('ours', 'cpu_s'):.1f} | {median('sb3', 'cpu_s'):.1f} | "
            f"{ratio('cpu_s'):.2f}x | {per_step:.0f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer-python", required=True, help="python of a venv with stable-baselines3")
    parser.add_argument("--tasks", type=lambda s: s.split(","), default=list(TASKS), help="comma list")
    parser.add_argument("--env-steps", type=int, default=50_000, help="env steps a run")
    parser.add_argument("--pairs", type=int, default=2, help="interleaved pairs per task (seeds 0..N-1)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the JSON record goes")
    args = parser.parse_args()
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        parser.error(f"--tasks {','.join(unknown)}: choose from {','.join(TASKS)}")
    if not Path(args.peer_python).is_file():
        parser.error(f"--peer-python {args.peer_python}: no such file; make SB3's venv as this script's help says")
    result = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
