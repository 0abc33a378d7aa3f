"""SPO against PPO on MuJoCo HalfCheetah-v5 at equal env steps (issue 20): both bundled configs through the CLI.

    python benchmarks/mujoco/spo_mujoco.py                                   # seeds 0,1,2 at 100k env steps each
    python benchmarks/mujoco/spo_mujoco.py --seeds 0 --total-env-steps 20000 --out /tmp/spo_hc
    python benchmarks/mujoco/spo_mujoco.py --read /tmp/spo_hc                # tables from finished runs

Runs ``configs/ppo_halfcheetah.yaml`` and ``configs/spo_halfcheetah.yaml`` one after the other, seed by seed
(PPO s0, SPO s0, PPO s1, ...), so that both algorithms see the same machine load, each as ``python -m
rl_lightning.cli fit`` in a subprocess with the same evaluation callback (deterministic acting: PPO's mean action,
SPO's search with its greedy root choice; whole episodes, raw returns) every ``--eval-every`` env steps. Curves are
read back from TensorBoard's own event files, as a user would see them; wall time is each subprocess's.
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
CONFIGS = {"ppo": REPO / "configs" / "ppo_halfcheetah.yaml", "spo": REPO / "configs" / "spo_halfcheetah.yaml"}

CALLBACKS = """\
trainer:
  callbacks:
    - class_path: rl_lightning.callbacks.Evaluation
      init_args: {{every_n_env_steps: {every}, num_episodes: {episodes}}}
    - class_path: rl_lightning.callbacks.FailFast
    - class_path: rl_lightning.callbacks.FaultCheckpoint
"""


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
        raise SystemExit(f"spo_mujoco.py: error: {run_dir} has no 'env_steps' scalar; give a run's version directory")
    curve = Curve(name or run_dir.name)
    if "eval/episode_return" in tags:
        curve.eval_return = [(e.step, e.value) for e in acc.Scalars("eval/episode_return")]
    if "eval/random_episode_return" in tags:
        curve.random_return = acc.Scalars("eval/random_episode_return")[-1].value
    events = [e for tag in tags for e in acc.Scalars(tag)]
    curve.env_steps = int(max(e.step for e in events))
    curve.wall_seconds = max(e.wall_time for e in events) - min(e.wall_time for e in events)
    return curve


def run_one(
    algo: str,
    seed: int,
    out: Path,
    total: int,
    fragment: Path,
    resume: bool = False,
    overrides: list[str] = (),
    tag: str = "",
) -> Curve:
    """One fit of ``algo``'s bundled config in a subprocess; its curve read back from TensorBoard.

    With ``resume``, a run that left ``checkpoints/last.ckpt`` (a stop by SIGTERM or Ctrl+C) continues from it, replay
    and counters included, logging into the same TensorBoard run; the wall time is then this continuation's only.
    """
    name = f"{algo}{tag}_seed{seed}"
    cmd = [sys.executable, "-m", "rl_lightning.cli", "fit", "--config", str(CONFIGS[algo]), "--config", str(fragment)]
    cmd += ["--seed_everything", str(seed), "--data.init_args.total_env_steps", str(total)]
    cmd += ["--trainer.default_root_dir", str(out), "--trainer.logger.init_args.save_dir", str(out)]
    cmd += ["--trainer.logger.init_args.name", "runs", "--trainer.logger.init_args.version", name]
    cmd += ["--trainer.enable_progress_bar", "false"]
    cmd += [part for kv in overrides for part in ("--" + kv.split("=", 1)[0], kv.split("=", 1)[1])]
    last = out / "runs" / name / "checkpoints" / "last.ckpt"
    if resume and last.exists():
        cmd += ["--ckpt_path", str(last)]
    print("  $", " ".join(cmd), flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=out)
    curve = read_curve(out / "runs" / name, name)
    curve.wall_seconds = time.perf_counter() - start
    return curve


def print_tables(curves: list[Curve]) -> None:
    """Per run: final and best eval return, wall time; the curves side by side; medians per algorithm."""
    print("\n== HalfCheetah-v5: SPO vs PPO at equal env steps (deterministic eval, raw returns) ==")
    print(f"{'run':>12} {'env steps':>10} {'wall min':>9} {'SPS':>6} {'final eval':>11} {'best':>8}")
    for c in curves:
        final = c.eval_return[-1][1] if c.eval_return else float("nan")
        best = max((v for _, v in c.eval_return), default=float("nan"))
        print(f"{c.name:>12} {c.env_steps:>10,} {c.wall_seconds / 60:>9.1f} {c.sps:>6.0f} {final:>11.0f} {best:>8.0f}")
    steps = sorted({s for c in curves for s, _ in c.eval_return})
    print("\n  eval return by env step: " + " | ".join(c.name for c in curves))
    for step in steps:
        values = [dict(c.eval_return).get(step) for c in curves]
        print(f"  {step:>9,}  " + " | ".join("-" if v is None else f"{v:,.0f}" for v in values))
    for algo in CONFIGS:
        runs = [c for c in curves if c.name.startswith(algo) and c.eval_return]
        if runs:
            finals = [c.eval_return[-1][1] for c in runs]
            walls = [c.wall_seconds for c in runs]
            print(
                f"  {algo}: median final {statistics.median(finals):,.0f} (min {min(finals):,.0f}, max "
                f"{max(finals):,.0f}) over {len(runs)} seeds; median wall {statistics.median(walls) / 60:.1f} min"
            )
    ppo = [c.wall_seconds for c in curves if c.name.startswith("ppo")]
    spo = [c.wall_seconds for c in curves if c.name.startswith("spo")]
    if ppo and spo:
        ratio = statistics.median(spo) / statistics.median(ppo)
        print(f"  wall ratio SPO/PPO (medians, same machine, interleaved): {ratio:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2", help="comma list of seeds (default 0,1,2)")
    parser.add_argument("--algos", default="ppo,spo", help="comma list of ppo,spo")
    parser.add_argument("--total-env-steps", type=int, default=100_000)
    parser.add_argument("--eval-every", type=int, default=20_000, help="env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="log directory (default: a new temporary one)")
    parser.add_argument("--override", action="append", default=[], help="KEY=VALUE for every run (repeatable)")
    parser.add_argument("--tag", default="", help="suffix of the run names (a variant: '_duallr')")
    parser.add_argument("--resume", action="store_true", help="continue runs that left checkpoints/last.ckpt in --out")
    parser.add_argument("--read", type=Path, default=None, help="only read the finished runs under this directory")
    args = parser.parse_args()
    if args.read is not None:
        runs = sorted(p for p in (args.read / "runs").iterdir() if p.is_dir())
        print_tables([read_curve(p, p.name) for p in runs])
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="rl_lightning_spo_mujoco_"))
    out.mkdir(parents=True, exist_ok=True)
    fragment = out / "eval_callbacks.yaml"
    fragment.write_text(CALLBACKS.format(every=args.eval_every, episodes=args.eval_episodes))
    curves = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for algo in args.algos.split(","):
            curves.append(
                run_one(algo, seed, out, args.total_env_steps, fragment, args.resume, args.override, args.tag)
            )
            print_tables(curves)


if __name__ == "__main__":
    main()
