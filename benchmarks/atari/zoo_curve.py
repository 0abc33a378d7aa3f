"""SB3 rl-zoo's published PPO Breakout curve at our evaluation points, from a local copy of its trained agent's logs.

The rl-zoo ships every benchmark agent with its training logs in the ``DLR-RM/rl-trained-agents`` repository
(``ppo/BreakoutNoFrameskip-v4_1/``: ``evaluations.npz`` from its ``EvalCallback``, 10 sampled whole games every 10k
agent steps, and one ``N.monitor.csv`` per training env, whole games: the ``Monitor`` sits under ``AtariWrapper``, so
its lengths are frames). Nothing is downloaded here: point ``--run`` at a checkout of that folder.

    python benchmarks/atari/zoo_curve.py --run rl-trained-agents/ppo/BreakoutNoFrameskip-v4_1 --to 1000000

Prints, at each point: the evaluation at that step, the mean of the evaluations within ±half a step of it, and the
mean whole-game return of the training episodes that ended in the window before it (agent steps = frames / 4 per env,
times the number of envs, the envs stepping in lockstep).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def training_returns(run: Path, frame_skip: int = 4) -> list[tuple[float, float]]:
    """(total agent steps when the game ended, its score) for every training game of every env."""
    files = sorted(run.glob("*.monitor.csv"))
    if not files:
        raise SystemExit(f"--run {run}: no N.monitor.csv files there; point it at the agent's folder")
    ended = []
    for path in files:
        frames = 0
        for line in path.read_text().splitlines()[2:]:  # a JSON header line, then "r,l,t"
            score, length, _ = line.split(",")
            frames += int(length)
            ended.append((frames / frame_skip * len(files), float(score)))
    return sorted(ended)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="rl-trained-agents/ppo/BreakoutNoFrameskip-v4_1")
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--to", type=int, default=1_000_000)
    args = parser.parse_args()
    evaluations = np.load(args.run / "evaluations.npz")
    steps, scores = evaluations["timesteps"], evaluations["results"].mean(axis=1)
    games = training_returns(args.run)
    print("| agent steps | evaluation at the step | evaluations within ±half a step (mean) | training games in the "
          "window before (mean, count) |")
    print("|---:|---:|---:|---:|")
    for point in range(args.every, args.to + 1, args.every):
        exact = scores[steps == point]
        near = scores[np.abs(steps - point) <= args.every // 2]
        window = [score for step, score in games if point - args.every < step <= point]
        print(f"| {point:,} | {exact[0] if exact.size else float('nan'):.1f} | {near.mean():.1f} | "
              f"{np.mean(window):.1f} ({len(window)}) |")


if __name__ == "__main__":
    main()
