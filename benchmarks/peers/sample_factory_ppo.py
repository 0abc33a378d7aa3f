"""Sample Factory 2.1's PPO on MuJoCo (its ``sf_examples.mujoco`` example, its own defaults), run in its own venv.

Not part of the package: the benchmarks call it as a subprocess with ``--sf-python`` (a venv holding
``torch==2.13.0``, ``sample-factory==2.1.1`` and ``gymnasium[mujoco]``, which its ``gymnasium<1.0`` pin resolves to
0.29.1); like the other scripts in this folder it prints one JSON line.

    python sample_factory_ppo.py train --env halfcheetah --total-env-steps 1000000 --train-dir DIR [--seed 0]
        [--target 3000]

``train`` runs Sample Factory's learner in this process (its rollout workers are its own processes: 8 workers × 8
envs by the example's defaults) on the CPU for ``--total-env-steps``, then reads its TensorBoard summary with
TensorBoard's loader. Sample Factory has no evaluation during training: ``final`` and ``history`` are its
``reward/reward`` series (the mean of the last 100 training episodes of the stochastic policy, written once 100
episodes have finished), and ``crossed`` the first (env steps, seconds since this script started) where it reaches
``--target``. ``train_seconds`` is the whole run's wall time (its start-up included: Sample Factory has no separate
clock), ``cpu_seconds`` this process's and its reaped children's user + system seconds over it. The example's env
table names ``HalfCheetah-v4`` (gymnasium 0.29 has no v5; v5 changes no dynamics or reward of HalfCheetah).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

ENVS = {"halfcheetah": "mujoco_halfcheetah", "hopper": "mujoco_hopper", "walker2d": "mujoco_walker",
        "ant": "mujoco_ant", "humanoid": "mujoco_humanoid", "swimmer": "mujoco_swimmer"}  # fmt: skip


def cpu_seconds() -> float:
    """User + system seconds of this process and of its children that have been waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def summary_scalars(summary_dir: Path) -> dict[str, list]:
    """Every scalar series Sample Factory wrote for its policy 0, by tag (TensorBoard's own loader)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(summary_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: acc.Scalars(tag) for tag in acc.Tags()["scalars"]}


def train(args: argparse.Namespace) -> dict:
    from sample_factory.train import run_rl
    from sf_examples.mujoco.train_mujoco import parse_mujoco_cfg, register_mujoco_components

    name = f"sf_{args.env}_s{args.seed}_{args.total_env_steps}"
    argv = ["--env", ENVS[args.env], "--device", "cpu", "--experiment", name, "--train_dir", str(args.train_dir),
            "--train_for_env_steps", str(args.total_env_steps), "--seed", str(args.seed),
            "--save_every_sec", "100000"]  # fmt: skip
    register_mujoco_components()
    cfg = parse_mujoco_cfg(argv=argv)
    start, cpu_start = time.time(), cpu_seconds()
    status = run_rl(cfg)
    wall, cpu = time.time() - start, cpu_seconds() - cpu_start
    if status:
        raise SystemExit(f"Sample Factory's run_rl exited with status {status}")
    series = summary_scalars(Path(args.train_dir) / name / ".summary" / "0")
    rewards = series.get("reward/reward", [])
    crossed = next(([e.step, e.wall_time - start] for e in rewards if e.value >= args.target), None)
    return {
        "env_steps": max(e.step for events in series.values() for e in events),
        "train_seconds": wall,
        "cpu_seconds": cpu,
        "final": rewards[-1].value if rewards else None,
        "crossed": crossed,
        "history": [[e.step, e.value] for e in rewards],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["train"])
    parser.add_argument("--env", default="halfcheetah", choices=sorted(ENVS))
    parser.add_argument("--total-env-steps", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-dir", type=Path, required=True, help="Sample Factory's --train_dir")
    parser.add_argument("--target", type=float, default=3000.0, help="the training-episode mean to time")
    print(json.dumps(train(parser.parse_args())), flush=True)


if __name__ == "__main__":
    main()
