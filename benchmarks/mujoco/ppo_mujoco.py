"""MuJoCo PPO speed (not ``mujoco.py``: run as a script, that name would shadow the ``mujoco`` package): env
throughput per Gymnasium backend for ``configs/ppo_halfcheetah.yaml``, and its wall time beside SB3's.

    python benchmarks/mujoco/ppo_mujoco.py --sections throughput        # env steps/s per Gymnasium backend
    python benchmarks/mujoco/ppo_mujoco.py --sections speed,throughput --num-envs 8 --peer-python SB3_VENV/bin/python

Needs ``pip install -e ".[mujoco]"``. The learning curves (HalfCheetah and the other five tasks, 3 seeds at 1M env
steps, beside the published figures) are the MuJoCo suite's: ``python benchmarks/suites/run.py mujoco``; this
script's former learning section is in git history up to commit 1e7842e.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))  # benchmarks/shared: _common.py & co.
CONFIG = REPO / "configs" / "ppo_halfcheetah.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="throughput", help="comma list of throughput,speed")
    parser.add_argument("--peer-python", default=None, help="python of a venv with stable-baselines3 (SB3 columns)")
    parser.add_argument("--speed-env-steps", type=int, default=100_000, help="speed: env steps per timed run")
    parser.add_argument("--repeats", type=int, default=2, help="speed: interleaved pairs of runs")
    parser.add_argument("--num-envs", type=int, default=None, help="throughput: envs (default: the config's)")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    if "speed" in sections:
        if args.peer_python is None:
            parser.error("--sections speed needs --peer-python (a venv with stable-baselines3 and torch==2.13.0)")
        from _peer_speed import print_speed, run_speed

        rows = run_speed(CONFIG.name, args.peer_python, "halfcheetah", args.speed_env_steps, args.repeats)
        print_speed(rows, CONFIG.name)
    if "throughput" in sections:
        from _mujoco_throughput import print_throughput, run_throughput

        print_throughput(run_throughput(CONFIG, args.num_envs, peer_python=args.peer_python))


if __name__ == "__main__":
    main()
