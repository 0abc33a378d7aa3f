"""The bundled MountainCar configs (issue 37 item 2): a fit per seed, then ``validate`` on its last checkpoint.

    python benchmarks/classic/mountaincar.py                                   # both configs, seeds 0,1,2
    python benchmarks/classic/mountaincar.py --configs ppo_mountaincar_continuous --seeds 0 --out /tmp/mc
    python benchmarks/classic/mountaincar.py --override model.init_args.sde=false   # a setting changed for every fit

Each seed runs, one process after another (one torch thread, ``OMP_NUM_THREADS=1``)::

    python -m rl_lightning.cli fit --config configs/<config>.yaml --seed_everything S \\
        --trainer.enable_progress_bar false --trainer.logger.init_args.save_dir OUT/<config>/seedS
    python -m rl_lightning.cli validate --config configs/<config>.yaml --seed_everything S \\
        --ckpt_path OUT/<config>/seedS/<name>/version_0/checkpoints/last.ckpt --data.init_args.eval_episodes 20

The fit keeps the config's own callbacks (its periodic evaluations and checkpoints are part of the measured time).
The figure is ``validate``'s ``eval/episode_return``: the deterministic policy of the last checkpoint over
``--episodes`` episodes (``Evaluation``'s fixed evaluation seed). Per seed it prints that return, the env steps the
checkpoint counted, the fit's wall and CPU seconds (the subprocess and its children, ``getrusage``) and the 1-minute
load average sampled every 5 s during the fit (mean and max). PASS per config if every seed reaches its threshold
(Gymnasium's ``reward_threshold``: -110 and 90) and every fit takes at most 20 minutes of wall time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))
from _load import LoadSampler, children_cpu_seconds  # noqa: E402

sys.path.insert(0, str(REPO))  # validate in this process with this checkout's package, as the fits do (PYTHONPATH)
THRESHOLDS = {"ppo_mountaincar": -110.0, "ppo_mountaincar_continuous": 90.0}
MAX_FIT_SECONDS = 20 * 60


@dataclass
class SeedRun:
    config: str
    seed: int
    eval_return: float  # validate's mean deterministic return on the last checkpoint
    env_steps: int
    wall_seconds: float  # the fit subprocess, start-up included
    cpu_seconds: float
    load_mean: float
    load_max: float


def timed(cmd: list[str], log: Path) -> tuple[float, float, float, float]:
    """Run ``cmd`` (stdout and stderr into ``log``); its wall and CPU seconds and the mean and max load average."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    with LoadSampler() as load, log.open("w") as out:
        before, start = children_cpu_seconds(), time.perf_counter()
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env).returncode
        wall, cpu = time.perf_counter() - start, children_cpu_seconds() - before
    if code:
        raise RuntimeError(f"{' '.join(cmd)} exited {code}; see {log}")
    return wall, cpu, load.mean, load.max


def validate(config: Path, seed: int, ckpt: Path, episodes: int, extra: list[str]) -> tuple[float, int]:
    """``rl-lightning validate`` on ``ckpt`` in this process: ``(eval/episode_return, env steps of the checkpoint)``."""
    import torch

    from rl_lightning.cli import cli_main

    args = ["validate", "--config", str(config), "--seed_everything", str(seed), "--ckpt_path", str(ckpt)]
    args += ["--data.init_args.eval_episodes", str(episodes), "--trainer.enable_progress_bar", "false"]
    args += ["--trainer.logger", "false", *extra]
    saved, sys.argv[1:] = sys.argv[1:], []  # LightningCLI warns when it sees both args= and command-line arguments
    try:
        cli = cli_main(args)
    finally:
        sys.argv[1:] = saved
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["OnPolicyDataModule"]
    env_steps = int(state["local_env_steps"])  # one rank: every env step of the run
    return float(cli.trainer.callback_metrics["eval/episode_return"]), env_steps


def run_seed(config: str, seed: int, out: Path, episodes: int, extra: list[str]) -> SeedRun:
    """One fit of ``configs/<config>.yaml`` in a subprocess, then ``validate`` of its last checkpoint."""
    path = REPO / "configs" / f"{config}.yaml"
    save_dir = out / config / f"seed{seed}"
    cmd = [sys.executable, "-m", "rl_lightning.cli", "fit", "--config", str(path), "--seed_everything", str(seed)]
    cmd += ["--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.save_dir", str(save_dir)]
    cmd += ["--trainer.logger.init_args.version", "0", "--trainer.default_root_dir", str(save_dir), *extra]
    save_dir.mkdir(parents=True, exist_ok=True)
    wall, cpu, load_mean, load_max = timed(cmd, save_dir / "fit.log")
    (ckpt,) = save_dir.glob("*/version_0/checkpoints/last.ckpt")
    eval_return, env_steps = validate(path, seed, ckpt, episodes, extra)
    return SeedRun(config, seed, eval_return, env_steps, wall, cpu, load_mean, load_max)


def print_table(runs: list[SeedRun]) -> bool:
    """The per-seed table and the PASS/FAIL line per config; returns the overall verdict."""
    header = f"{'config':<28} {'seed':>4} {'eval return':>11} {'env steps':>9} {'wall s':>7} {'CPU s':>7} {'load':>9}"
    print("\n== MountainCar: final deterministic evaluation of the last checkpoint ==")
    print(header)
    print("-" * len(header))
    for r in runs:
        load = f"{r.load_mean:.1f}/{r.load_max:.1f}"
        print(f"{r.config:<28} {r.seed:>4} {r.eval_return:>11.1f} {r.env_steps:>9} {r.wall_seconds:>7.0f} "
              f"{r.cpu_seconds:>7.0f} {load:>9}")  # fmt: skip
    print("-" * len(header) + "\n(load: 1-minute load average during the fit, mean/max)")
    verdicts = []
    for config in dict.fromkeys(r.config for r in runs):
        mine = [r for r in runs if r.config == config]
        solved = sum(r.eval_return >= THRESHOLDS[config] for r in mine)
        fast = all(r.wall_seconds <= MAX_FIT_SECONDS for r in mine)
        ok = solved == len(mine) and fast
        verdicts.append(ok)
        print(f"  {'PASS' if ok else 'FAIL'}  {config}: {solved}/{len(mine)} seeds >= {THRESHOLDS[config]:g}, "
              f"slowest fit {max(r.wall_seconds for r in mine):.0f} s (limit {MAX_FIT_SECONDS} s)")  # fmt: skip
    return all(verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default=",".join(THRESHOLDS), help="comma list of " + ",".join(THRESHOLDS))
    parser.add_argument("--seeds", default="0,1,2", help="comma list of seeds")
    parser.add_argument("--episodes", type=int, default=20, help="deterministic episodes of the final evaluation")
    parser.add_argument("--out", type=Path, default=None, help="run directories (default: a new temporary one)")
    parser.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="extra CLI setting for every fit and validate, e.g. data.init_args.total_env_steps=50000",
    )  # fmt: skip
    args = parser.parse_args()
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in THRESHOLDS]
    if unknown:
        parser.error(f"--configs: unknown {unknown}; choose from {list(THRESHOLDS)}")
    out = args.out or Path(tempfile.mkdtemp(prefix="mountaincar_"))
    extra = [part for kv in args.override for part in ("--" + kv.split("=", 1)[0], kv.split("=", 1)[1])]
    print(f"MountainCar benchmark: cpus {os.cpu_count()}, out {out}, overrides {args.override or 'none'}")
    runs = []
    for config in configs:
        for seed in (int(s) for s in args.seeds.split(",")):
            run = run_seed(config, seed, out, args.episodes, extra)
            runs.append(run)
            print(f"  [{config} seed {seed}] eval {run.eval_return:.1f} after {run.env_steps} env steps, "
                  f"{run.wall_seconds:.0f} s wall, {run.cpu_seconds:.0f} s CPU, load {run.load_mean:.1f}",
                  flush=True)  # fmt: skip
    print(f"\nOVERALL: {'PASS' if print_table(runs) else 'FAIL'}")


if __name__ == "__main__":
    main()
