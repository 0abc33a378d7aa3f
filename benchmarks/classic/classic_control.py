"""PPO on Gymnasium's classic-control set, 5 seeds each, through the CLI and the Gymnasium adapter.

    python benchmarks/classic/classic_control.py                          # every env, seeds 0..4
    python benchmarks/classic/classic_control.py --envs Acrobot-v1 --seeds 3 --steps 50000

Each run is ``rl-lightning fit`` (``rl_lightning.cli.cli_main``, in-process) on a bundled PPO config with only the
env and the budget changed on the command line::

    --config configs/ppo.yaml --data.init_args.env rl_lightning.envs.GymnasiumEnv \\
        --data.init_args.env.env_id Acrobot-v1 --data.init_args.total_env_steps 100000 --seed_everything 0

Discrete envs use ``configs/ppo.yaml``, continuous ones ``configs/ppo_pendulum.yaml``; no per-env tuning. The logger,
checkpointing, progress bar and the configs' callbacks are replaced by one evaluation (``--eval-episodes``
deterministic episodes, every fifth of the budget and at the end). The reported figure is the **final** evaluation
of each seed; the per-seed curves printed as the runs finish also give the policy entropy (``H``, the last logged
``train/entropy``) at each evaluation. Random play (uniform actions, same episodes) and published PPO figures are
printed beside it.

PASS per env if every seed's final return reaches the env's threshold (Gymnasium's ``reward_threshold``; Pendulum has
none: -250 as in ``benchmarks/classic/ppo.py``). Observation/reward normalisation does not exist yet, which the
published MountainCar figures rely on: expect MountainCar-v0 to FAIL (CleanRL's un-normalised PPO gets -200 too).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))  # benchmarks/shared: _common.py & co.
from _common import RunResult, TargetEvaluation, fit_with, overrides_to_args, print_summary

# isort: split
import lightning.pytorch as pl
import torch

from rl_lightning.envs import GymnasiumEnv
from rl_lightning.evaluation.episodes import run_episodes


@dataclass(frozen=True)
class ClassicTask:
    env_id: str
    config: str  # the bundled config the run starts from
    steps: int  # env-step budget per seed
    threshold: float  # PASS: every seed's final deterministic return >= this
    published: str  # published PPO figures, with their budgets (see benchmarks/NOTES.md for the sources)


# Published figures: rl-zoo = DLR-RM/rl-baselines3-zoo benchmark.md (one run, deterministic eval over ~150k steps,
# tuned per env in hyperparams/ppo.yml, VecNormalize on MountainCar/MountainCarContinuous); CleanRL =
# docs/rl-algorithms/ppo.md (`ppo.py`, 500k steps, 3 seeds, training-episode returns, no normalisation).
_CLEANRL = "CleanRL @500k:"
TASKS = {
    "CartPole-v1": ClassicTask(
        "CartPole-v1", "ppo.yaml", 51_200, 475.0, f"rl-zoo 500.0±0.0 @100k; {_CLEANRL} 492.4±13.1"
    ),
    "Acrobot-v1": ClassicTask(
        "Acrobot-v1", "ppo.yaml", 100_000, -100.0, f"rl-zoo -73.5±18.2 @1M; {_CLEANRL} -89.9±6.3"
    ),
    "MountainCar-v0": ClassicTask(
        "MountainCar-v0", "ppo.yaml", 51_200, -110.0, f"rl-zoo -110.4±19.5 @1M (normalised); {_CLEANRL} -200.0±0.0"
    ),
    "Pendulum-v1": ClassicTask(
        "Pendulum-v1", "ppo_pendulum.yaml", 102_400, -250.0, "rl-zoo -169.9±104.9 @2M (Pendulum-v0)"
    ),
    "MountainCarContinuous-v0": ClassicTask(
        "MountainCarContinuous-v0", "ppo_pendulum.yaml", 51_200, 90.0, "rl-zoo 88.3±2.6 @20k (normalised, gSDE, tuned)"
    ),
}


class EntropyEvaluation(TargetEvaluation):
    """``TargetEvaluation`` that also records the last logged ``train/entropy`` at each evaluation (a collapse to ~0
    early in training is the failure mode the PPO defaults must avoid)."""

    def evaluate(self, trainer: pl.Trainer, pl_module: Any, on_step: bool = True) -> dict[str, float]:
        record = super().evaluate(trainer, pl_module, on_step)
        entropy = trainer.callback_metrics.get("train/entropy")
        record["entropy"] = float("nan") if entropy is None else float(entropy)
        return record


def env_args(env_id: str, steps: int) -> list[str]:
    """The command-line settings that turn a bundled config into a run on ``env_id`` with ``steps`` env steps."""
    return [
        "--data.init_args.env",
        "rl_lightning.envs.GymnasiumEnv",
        "--data.init_args.env.env_id",
        env_id,
        "--data.init_args.total_env_steps",
        str(steps),
    ]


def run_seed(task: ClassicTask, seed: int, steps: int, episodes: int, overrides: list[str]) -> RunResult:
    callback = EntropyEvaluation(
        "return", None, every_n_env_steps=max(steps // 5, 1), num_episodes=episodes, deterministic=True
    )
    return fit_with(task.config, seed, callback, [*env_args(task.env_id, steps), *overrides])


def random_return(env_id: str, episodes: int) -> float:
    """Mean return of uniform-random play on the evaluation's episodes (same env seed as ``Evaluation``)."""
    returns, _ = run_episodes("random", GymnasiumEnv(env_id), episodes, torch.device("cpu"), 12_345)
    return float(returns.mean())


def print_table(results: dict[str, list[RunResult]], randoms: dict[str, float]) -> None:
    print("\n== PPO on Gymnasium classic control: final deterministic eval return per seed ==")
    header = f"{'env':<25} {'steps':>7} {'per seed (final)':<44} {'mean±std':>15} {'solved':>6} {'random':>8}"
    print(header)
    print("-" * len(header))
    for env_id, runs in results.items():
        finals = [r.final_score for r in runs]
        spread = statistics.stdev(finals) if len(finals) > 1 else 0.0
        solved = sum(f >= TASKS[env_id].threshold for f in finals)
        per_seed = ", ".join(f"{f:.1f}" for f in finals)
        print(
            f"{env_id:<25} {runs[0].total_env_steps:>7} {per_seed:<44} "
            f"{f'{statistics.mean(finals):.1f}±{spread:.1f}':>15} {f'{solved}/{len(runs)}':>6} {randoms[env_id]:>8.1f}"
        )
    print("-" * len(header))
    for env_id in results:
        print(f"  published PPO, {env_id}: {TASKS[env_id].published}")


def summarise(results: dict[str, list[RunResult]]) -> bool | None:
    rows: list[tuple[str, str, str, str]] = []
    verdicts: list[bool] = []
    for env_id, runs in results.items():
        threshold = TASKS[env_id].threshold
        ok = all(r.final_score >= threshold for r in runs)
        verdicts.append(ok)
        rows.append((
            f"{env_id}: final eval return, every seed",
            ", ".join(f"{r.final_score:.1f}" for r in runs),
            f">= {threshold:g}",
            "PASS" if ok else "FAIL",
        ))  # fmt: skip
    return print_summary(rows, verdicts, "criterion")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", default=",".join(TASKS), help="comma list of " + ",".join(TASKS))
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 per env")
    parser.add_argument("--steps", type=int, default=None, help="env-step budget per run (default: per env)")
    parser.add_argument("--eval-episodes", type=int, default=10, help="deterministic episodes per evaluation")
    parser.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="extra CLI setting for every run, e.g. --override model.init_args.ent_coef=0.0",
    )  # fmt: skip
    args = parser.parse_args()
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    unknown = [e for e in envs if e not in TASKS]
    if unknown:
        parser.error(f"--envs: unknown {unknown}; choose from {list(TASKS)}")
    torch.set_num_threads(1)
    print(
        f"rl_lightning PPO classic-control benchmark: torch {torch.__version__}, lightning {pl.__version__}, "
        f"cpus {os.cpu_count()}, seeds {args.seeds}, overrides {args.override or 'none'}"
    )
    results: dict[str, list[RunResult]] = {}
    randoms: dict[str, float] = {}
    for env_id in envs:
        task = TASKS[env_id]
        steps = args.steps or task.steps
        randoms[env_id] = random_return(env_id, args.eval_episodes)
        results[env_id] = []
        for seed in range(args.seeds):
            r = run_seed(task, seed, steps, args.eval_episodes, overrides_to_args(args.override))
            results[env_id].append(r)
            curve = " ".join(f"{int(h['env_steps'])}:{h['score']:.1f}/H={h['entropy']:.2f}" for h in r.history)
            print(f"  [{env_id} seed {seed}] final={r.final_score:.1f} fit={r.fit_seconds:.0f}s  {curve}", flush=True)
    print_table(results, randoms)
    overall = summarise(results)
    if overall is not None:
        print(f"\nOVERALL: {'PASS' if overall else 'FAIL'}")


if __name__ == "__main__":
    main()
