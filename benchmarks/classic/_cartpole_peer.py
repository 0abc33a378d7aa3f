"""``benchmarks/classic/ppo.py --sections peer``: PPO's time to solve CartPole, ours against Stable-Baselines3,
seed by seed.

Ours: ``configs/ppo.yaml`` through ``run_learning`` (the learning section's run: 20 deterministic episodes every 1,024
env steps, checked after each update, stop at mean return >= 475). SB3: ``peers/sb3_ppo.py solve`` with rl-zoo's
CartPole-v1 settings (8 envs × 32 steps, the same update size) and the same evaluation cadence, episodes and target,
in SB3's own virtual environment. Both on one torch thread; the runs alternate (ours, SB3, ours, ...) so a shared
machine's load hits both alike. Training seconds exclude evaluation on both sides.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

PEER_SCRIPT = Path(__file__).resolve().parents[1] / "peers" / "sb3_ppo.py"
TARGET_RATIO = 0.5  # issue 13: ours' median training wall <= 0.5x SB3's


def sb3_solve(peer_python: str, seed: int) -> dict[str, Any]:
    cmd = [
        peer_python,
        str(PEER_SCRIPT),
        "solve",
        "--env",
        "cartpole",
        "--seed",
        str(seed),
        "--total-env-steps",
        "100000",
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_peer(seeds: list[int], peer_python: str, ours: Callable[[int], Any]) -> list[dict[str, Any]]:
    rows = []
    for seed in seeds:
        mine = ours(seed)
        theirs = sb3_solve(peer_python, seed)
        rows.append({
            "seed": seed,
            "ours_steps": mine.env_steps if mine.crossed else None,
            "ours_s": mine.train_seconds,
            "sb3_steps": theirs["env_steps"] if theirs["crossed"] else None,
            "sb3_s": theirs["train_seconds"],
        })  # fmt: skip
        r = rows[-1]
        print(f"  [peer seed {seed}] ours {r['ours_steps']} env steps, {r['ours_s']:.2f} s; "
              f"SB3 {r['sb3_steps']} env steps, {r['sb3_s']:.2f} s", flush=True)  # fmt: skip
    return rows


def print_peer(rows: list[dict[str, Any]]) -> bool:
    print("\n== PPO CartPole to a 20-episode deterministic evaluation >= 475: ours (configs/ppo.yaml) vs SB3 "
          "(rl-zoo), interleaved, 1 thread ==")  # fmt: skip
    print(f"{'seed':>4} {'ours env steps':>15} {'ours train s':>13} {'SB3 env steps':>14} {'SB3 train s':>12}")
    for r in rows:
        print(f"{r['seed']:>4} {str(r['ours_steps']):>15} {r['ours_s']:>13.2f} {str(r['sb3_steps']):>14} "
              f"{r['sb3_s']:>12.2f}")  # fmt: skip
    inf = float("inf")
    ours_steps = statistics.median(r["ours_steps"] or inf for r in rows)
    sb3_steps = statistics.median(r["sb3_steps"] or inf for r in rows)
    ours_s, sb3_s = statistics.median(r["ours_s"] for r in rows), statistics.median(r["sb3_s"] for r in rows)
    ratio = ours_s / sb3_s
    steps_ok, time_ok = ours_steps <= sb3_steps, ratio <= TARGET_RATIO
    print(f"  median env steps: ours {ours_steps:,.0f}, SB3 {sb3_steps:,.0f} ({'PASS' if steps_ok else 'MISS'}: "
          "ours no more than SB3's)")  # fmt: skip
    print(f"  median training seconds: ours {ours_s:.2f}, SB3 {sb3_s:.2f}: ratio {ratio:.2f} "
          f"({'PASS' if time_ok else 'MISS'}: <= {TARGET_RATIO})")  # fmt: skip
    return steps_ok and time_ok
