"""MuJoCo PPO benchmark (not ``mujoco.py``: run as a script, that name would shadow the ``mujoco`` package):
``configs/ppo_halfcheetah.yaml`` through the CLI, its TensorBoard curves, and env throughput per backend.

    python benchmarks/mujoco/ppo_mujoco.py                              # seed 0, 1M env steps (~27 CPU-minutes)
    python benchmarks/mujoco/ppo_mujoco.py --seeds 0,1,2 --out /tmp/hc  # one run after another
    python benchmarks/mujoco/ppo_mujoco.py --total-env-steps 300000     # a shorter run (the curve up to there)
    python benchmarks/mujoco/ppo_mujoco.py --read /tmp/hc/ppo_halfcheetah/seed0   # tables from finished runs' events
    python benchmarks/mujoco/ppo_mujoco.py --sections throughput        # env steps/s per Gymnasium backend
    python benchmarks/mujoco/ppo_mujoco.py --sections speed,throughput --num-envs 8 --peer-python SB3_VENV/bin/python

Needs ``pip install -e ".[mujoco]"``. Each learning run is ``python -m rl_lightning.cli fit --config
configs/ppo_halfcheetah.yaml --seed_everything S`` with the config's own callbacks (deterministic evaluation of
whole episodes with raw returns every 50k env steps), logging to ``OUT/ppo_halfcheetah/seedS``; the tables are
read back with TensorBoard's ``EventAccumulator``, as a user would see the curves.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))  # benchmarks/shared: _common.py & co.
CONFIG = REPO / "configs" / "ppo_halfcheetah.yaml"

# Published figures at 1M env steps (research/envs.md §4 and issue 11). None of these sources gives a figure at an
# intermediate step, so shorter runs are compared only against the curve's shape, not against a number.
REFERENCES = [
    ("SB3 PPO, rl-zoo settings, this 2-core machine (issue 11)", "v5", "6,945 (seed 0, 34 min)"),
    ("rl-zoo benchmark.md, deterministic eval ~150k steps, 1 run", "v3", "5,819 ± 664"),
    ("CleanRL ppo_continuous_action, last-100 training returns, 3 seeds", "v4", "1,443 ± 46"),
]


@dataclass
class Curve:
    """One run as read from its TensorBoard event files."""

    name: str
    eval_return: list[tuple[int, float]] = field(default_factory=list)  # (env step, mean eval return)
    random_return: float = float("nan")
    env_steps: int = 0
    wall_seconds: float = float("nan")  # first to last event (the subprocess time when this script ran it)

    @property
    def sps(self) -> float:
        return self.env_steps / self.wall_seconds


def read_curve(run_dir: Path, name: str | None = None) -> Curve:
    """``eval/*`` and ``env_steps`` of the TensorBoard run in ``run_dir`` (a ``version`` directory)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    if "env_steps" not in tags:
        raise SystemExit(f"ppo_mujoco.py: error: {run_dir} has no 'env_steps' scalar; give a run's version directory")
    curve = Curve(name or run_dir.name)
    if "eval/episode_return" in tags:
        curve.eval_return = [(e.step, e.value) for e in acc.Scalars("eval/episode_return")]
    if "eval/random_episode_return" in tags:
        curve.random_return = acc.Scalars("eval/random_episode_return")[-1].value
    events = [e for tag in tags for e in acc.Scalars(tag)]
    curve.env_steps = int(max(e.step for e in events))
    curve.wall_seconds = max(e.wall_time for e in events) - min(e.wall_time for e in events)
    return curve


def run_seed(seed: int, out: Path, total_env_steps: int | None) -> Curve:
    """One ``rl_lightning.cli fit`` of the bundled config in a subprocess; its curve read back from TensorBoard."""
    cmd = [sys.executable, "-m", "rl_lightning.cli", "fit", "--config", str(CONFIG), "--seed_everything", str(seed)]
    cmd += ["--trainer.default_root_dir", str(out), "--trainer.logger.init_args.save_dir", str(out)]
    cmd += ["--trainer.logger.init_args.version", f"seed{seed}", "--trainer.enable_progress_bar", "false"]
    if total_env_steps is not None:
        cmd += ["--data.init_args.total_env_steps", str(total_env_steps)]
    print("  $", " ".join(cmd), flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=out)
    seconds = time.perf_counter() - start
    curve = read_curve(out / "ppo_halfcheetah" / f"seed{seed}", f"seed{seed}")
    curve.wall_seconds = seconds
    return curve


def print_learning(curves: list[Curve]) -> None:
    """Per run: env steps, wall time, SPS, random and final eval return; then every eval point; then references."""
    print("\n== PPO HalfCheetah-v5, configs/ppo_halfcheetah.yaml (deterministic eval, raw returns) ==")
    print(f"{'run':>10} {'env steps':>10} {'wall min':>9} {'SPS':>6} {'random':>8} {'final eval':>11} {'best':>8}")
    for c in curves:
        final = c.eval_return[-1][1] if c.eval_return else float("nan")
        best = max((v for _, v in c.eval_return), default=float("nan"))
        print(
            f"{c.name:>10} {c.env_steps:>10,} {c.wall_seconds / 60:>9.1f} {c.sps:>6.0f} {c.random_return:>8.0f} "
            f"{final:>11.0f} {best:>8.0f}"
        )
    finals = [c.eval_return[-1][1] for c in curves if c.eval_return]
    if len(finals) > 1:
        print(f"  median final {statistics.median(finals):.0f}, min {min(finals):.0f} over {len(finals)} runs")
    steps = sorted({s for c in curves for s, _ in c.eval_return})
    print("\n  eval return by env step: " + " | ".join(c.name for c in curves))
    for step in steps:
        values = [dict(c.eval_return).get(step) for c in curves]
        print(f"  {step:>9,}  " + " | ".join("-" if v is None else f"{v:,.0f}" for v in values))
    print("\n  published, 1M env steps (no source gives intermediate values):")
    for source, version, value in REFERENCES:
        print(f"    {version}  {value:<24} {source}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0", help="comma list of seeds to run (default 0)")
    parser.add_argument("--out", type=Path, default=None, help="log directory (default: a new temporary one)")
    parser.add_argument("--total-env-steps", type=int, default=None, help="override the config's 1M budget")
    parser.add_argument("--read", type=Path, nargs="+", default=None, help="only read these finished runs")
    parser.add_argument("--sections", default="learning", help="comma list of learning,throughput,speed")
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
    if "learning" not in sections:
        return
    if args.read:
        curves = [read_curve(path, path.name) for path in args.read]
    else:
        out = args.out or Path(tempfile.mkdtemp(prefix="rl_lightning_mujoco_"))
        out.mkdir(parents=True, exist_ok=True)
        curves = [run_seed(int(s), out, args.total_env_steps) for s in args.seeds.split(",")]
    print_learning(curves)


if __name__ == "__main__":
    main()
