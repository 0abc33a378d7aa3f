"""``rl-lightning tune`` on PPO CartPole: does a study find settings that reach the target in fewer env steps than the
bundled ``ppo.yaml``, how long does it take, and how much faster do two workers on one SQLite study finish?

    python benchmarks/tune/tune.py                       # 20 trials x 2 seeds x 30k env steps, then 3 seeds each of
                                                    # bundled vs best
    python benchmarks/tune/tune.py --skip-study          # only the parallel-workers ratio
    python benchmarks/tune/tune.py --trials 6 --budget 20000 --seeds 2 --parallel-trials 4   # a cheaper run

Sections: ``study`` (wall time of the study, as a user runs it: ``rl-lightning tune`` subprocess, AUC objective, median
pruner), ``compare`` (env steps at which the deterministic evaluation first reaches ``--target`` for the bundled
config and for ``best.yaml``, ``--seeds`` seeds each, evaluated every 2,048 env steps), ``parallel`` (the same number
of fixed-budget, unpruned trials by one ``tune`` process, then by two processes on one fresh SQLite study: the ratio of
wall times; on a 2-core machine shared with other load, say so next to the figure).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))  # benchmarks/shared: _common.py & co.
from _common import REPO, TargetEvaluation, fit_with, median_or_inf  # noqa: E402

SEARCH = {
    "model.init_args.lr": {"low": 3e-4, "high": 1e-2, "log": True},
    "model.init_args.update_epochs": {"low": 4, "high": 20, "step": 4},
    "model.init_args.gamma": {"choices": [0.95, 0.98, 0.99]},
    "model.init_args.gae_lambda": {"choices": [0.8, 0.9, 0.95]},
    "model.init_args.ent_coef": {"low": 0.0, "high": 0.02},
    "data.init_args.num_steps": {"choices": [16, 32, 64]},
}
EVAL_EVERY = 2048


def _tune(folder: Path, trials: int, budget: int, extra: list[str]) -> subprocess.Popen[str]:
    (folder / "search.yaml").write_text(yaml.safe_dump(SEARCH))
    evaluation = {"class_path": "rl_lightning.callbacks.Evaluation",
                  "init_args": {"every_n_env_steps": EVAL_EVERY, "num_episodes": 10}}  # fmt: skip
    (folder / "eval.yaml").write_text(yaml.safe_dump({"trainer": {"callbacks+": [evaluation]}}))
    args = ["tune", "--config", "ppo.yaml", "--config", "eval.yaml", "--search", "search.yaml", "--n_trials",
            str(trials), "--dir", "study", "--data.init_args.total_env_steps", str(budget), *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "rl_lightning.cli", *args]
    return subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def study(folder: Path, trials: int, budget: int, seeds_per_trial: int) -> tuple[float, Path]:
    """Run the study (a trial scores the mean over ``seeds_per_trial`` fits); its wall time and ``best.yaml``."""
    start = time.perf_counter()
    options = ["--objective", "auc", "--pruner", "median", "--sampler_seed", "0", "--seeds_per_trial"]
    process = _tune(folder, trials, budget, [*options, str(seeds_per_trial)])
    output = process.communicate()[0]
    seconds = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"tune failed:\n{output[-3000:]}")
    print(output[output.find("trial ") :].rstrip())
    return seconds, folder / "study" / "best.yaml"


def steps_to_target(config: str, seeds: int, target: float) -> list[int | None]:
    """Env steps at the first evaluation reaching ``target``, per seed (``None``: not within the config's budget)."""
    found = []
    for seed in range(seeds):
        callback = TargetEvaluation("return", target, every_n_env_steps=EVAL_EVERY, num_episodes=10)
        found.append(fit_with(config, seed, callback).env_steps)
    return found


def parallel(trials: int, budget: int) -> tuple[float, float]:
    """Wall seconds for ``trials`` unpruned trials with one worker, then with two workers on one SQLite study."""
    times = []
    for workers in (1, 2):
        with tempfile.TemporaryDirectory(prefix="rl_lightning_tune_bench_") as folder:
            start = time.perf_counter()
            running = [_tune(Path(folder), trials, budget, ["--pruner", "none", "--sampler_seed", str(i)])
                       for i in range(workers)]  # fmt: skip
            outputs = [p.communicate()[0] for p in running]
            times.append(time.perf_counter() - start)
            if any(p.returncode for p in running):
                raise SystemExit("tune failed:\n" + "\n".join(o[-2000:] for o in outputs))
    return times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--budget", type=int, default=30_000, help="env steps per trial")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per config in the comparison")
    parser.add_argument("--seeds-per-trial", type=int, default=2, help="fits per trial, the objective their mean")
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--parallel-trials", type=int, default=4)
    parser.add_argument("--parallel-budget", type=int, default=8192)
    parser.add_argument("--skip-study", action="store_true")
    parser.add_argument("--skip-parallel", action="store_true")
    args = parser.parse_args()
    rows = []
    if not args.skip_study:
        with tempfile.TemporaryDirectory(prefix="rl_lightning_tune_bench_") as folder:
            seconds, best = study(Path(folder), args.trials, args.budget, args.seeds_per_trial)
            rows.append(
                f"study: {args.trials} trials x {args.seeds_per_trial} seeds x {args.budget} env steps: "
                f"{seconds:.0f} s wall"
            )
            fit_only = yaml.safe_load(best.read_text())
            for key in ("ckpt_path", "weights_only"):  # fit's own options; the benchmark builds the CLI without them
                fit_only.pop(key, None)
            (Path(folder) / "best_config.yaml").write_text(yaml.safe_dump(fit_only, sort_keys=False))
            best = Path(folder) / "best_config.yaml"
            for name, config in (("bundled ppo.yaml", "ppo.yaml"), ("tuned best.yaml", str(best))):
                steps = steps_to_target(config, args.seeds, args.target)
                rows.append(f"{name}: env steps to eval >= {args.target:g}: {steps} (median {median_or_inf(steps)})")
    if not args.skip_parallel:
        one, two = parallel(args.parallel_trials, args.parallel_budget)
        rows.append(
            f"parallel: {args.parallel_trials} trials x {args.parallel_budget} env steps: 1 worker {one:.0f} s, "
            f"2 workers {two:.0f} s, ratio {one / two:.2f}x (load average {os.getloadavg()[0]:.1f}, "
            f"{os.cpu_count()} CPUs)"
        )
    print("\n".join(rows))


if __name__ == "__main__":
    main()
