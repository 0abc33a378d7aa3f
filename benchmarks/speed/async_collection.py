"""Collection beside learning (issue 35): the serial path, actor processes (``data.num_actors``) and the peers, side
by side in one run, interleaved seed by seed, with wall and CPU seconds for every run.

    python benchmarks/speed/async_collection.py --quick                       # every section, short budgets
    python benchmarks/speed/async_collection.py --seeds 0,1,2                 # the throughput figures
    python benchmarks/speed/async_collection.py --sections halfcheetah --full --seeds 0,1,2   # time to 3,000, 1M return
    python benchmarks/speed/async_collection.py --sections halfcheetah --full --seeds 0,1,2 --full-steps 204800 \
        --actors 1@ppo_halfcheetah_async.yaml,0@ppo_halfcheetah_async.yaml      # the async recipe, serial beside
    python benchmarks/speed/async_collection.py --sections breakout --full    # Breakout learning curves to 1M

Sections (each its own function; sides in ``--actors``: 0 = serial, N actors, Ns = N actors with actor_env_splits 2,
Nr = N actors on Ray (a local instance), N@FILE = N actors on another bundled config, e.g.
``1@ppo_halfcheetah_async.yaml``):
  halfcheetah  PPO ``ppo_halfcheetah.yaml`` against SB3 (rl-zoo settings) and Sample Factory 2.1's MuJoCo example:
               env steps/s over ``--cheetah-steps``; ``--full``: training seconds to the first evaluation >= 3,000
               (5 deterministic episodes every 10,240 env steps, their time taken out) and ours' 1M-step return.
  breakout     PPO ``ppo_atari.yaml`` (8 envs) against SB3's ``train`` (rl-zoo Atari): end-to-end agent steps/s;
               ``--full``: the config's own evaluations to 1M agent steps.
  hearts       ``ppo_hearts.yaml`` without its GameEvaluation: decisions/s over the whole fit.
  connect_four ``alphazero_connect_four.yaml`` without its GameEvaluation: env steps in ``--c4-seconds`` of fit.
  dreamer      ``dreamer.yaml`` (CartPole) and ``dreamer_pendulum`` (``dreamer_pendulum.yaml``): ``--dreamer-steps``
               env steps at the replay ratio, the actor's and the learner's busy shares, the return at the end.

Ours run ``rl_lightning.cli`` in a subprocess (this script's ``_fit`` mode): the config with its callbacks replaced
(no checkpoints; an ``Evaluation`` only where timed), its TensorBoard events read back with TensorBoard's loader
(``perf/actor_busy``, ``perf/learner_busy``, ``policy/lag``, ``eval/episode_return`` and the training seconds at
each evaluation). Peers run in their own virtual environments (``--sb3-python``, ``--sf-python``). "train s" is the
fit's wall time from ``on_train_start`` (after ``setup`` built the envs and placed the model, as SB3's clock starts
at ``learn`` with its envs and model built) to its end, evaluation taken out; "CPU s" the user + system seconds over
the same span, actor and env processes included (the setup's seconds are printed beside); "proc" columns are the
whole subprocess (start-up included), from ``getrusage``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(__file__).resolve().parents[1] / "shared"
SB3 = Path(__file__).resolve().parents[1] / "peers" / "sb3_ppo.py"
SAMPLE_FACTORY = Path(__file__).resolve().parents[1] / "peers" / "sample_factory_ppo.py"
SECTIONS = ("halfcheetah", "breakout", "hearts", "connect_four", "dreamer", "dreamer_pendulum")
DEFAULT_ACTORS = {"halfcheetah": ["0", "1"], "breakout": ["0", "1", "1s", "2"], "hearts": ["0", "1"],
                  "connect_four": ["0", "1", "2"], "dreamer": ["0", "1"], "dreamer_pendulum": ["0", "1"]}  # fmt: skip
CONFIGS = {"halfcheetah": "ppo_halfcheetah.yaml", "breakout": "ppo_atari.yaml", "hearts": "ppo_hearts.yaml",
           "connect_four": "alphazero_connect_four.yaml", "dreamer": "dreamer.yaml",
           "dreamer_pendulum": "dreamer_pendulum.yaml"}  # fmt: skip
sys.path.insert(0, str(SHARED))
from _load import LoadSampler, children_cpu_seconds  # noqa: E402

CHEETAH_EVAL_EVERY, CHEETAH_TARGET = 10_240, 3000.0
OURS_EXTRA: list[str] = []  # --ours-extra: CLI options added to every one of our fits


def cpu_seconds() -> float:
    """User + system seconds of this process and all its descendants: those waited for (rusage), and the live ones
    with what they have waited for in turn (``/proc``: the fork server holds its finished actors' seconds)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + live_descendants_cpu_seconds(os.getpid())


def live_descendants_cpu_seconds(pid: int) -> float:
    """``utime + stime + cutime + cstime`` of every live process below ``pid`` (Linux ``/proc``; 0 elsewhere)."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc/self/stat").exists() else []:
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
    children: dict[int, list[int]] = {}
    for child, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(child)
    ticks, todo = 0, list(children.get(pid, []))
    while todo:
        child = todo.pop()
        ticks += sum(int(value) for value in stats[child][11:15])  # utime stime cutime cstime
        todo += children.get(child, [])
    return ticks / os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------------------------------------------
# the fit subprocess
# ----------------------------------------------------------------------------------------------------------------
def child_fit(argv: list[str]) -> None:
    """``_fit CONFIG SEED LOGDIR VERSION EVALUATION [CLI args...]``: one timed fit; prints one JSON line.

    ``EVALUATION``: ``Evaluation``'s arguments as JSON (``{}``: none)."""
    config, seed, logdir, version, evaluation, *extra = argv
    sys.path.insert(0, str(SHARED))
    import _common  # noqa: F401 - silences warnings and Lightning's INFO logging
    from lightning.pytorch.callbacks import Callback

    from rl_lightning.callbacks import Evaluation
    from rl_lightning.cli import cli_main
    from rl_lightning.reporting.env_step_log import log_at_env_step

    class TimedEvaluation(Evaluation):
        """``Evaluation`` that also logs ``bench/train_seconds``: fit wall time so far minus evaluation time."""

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.fit_start = time.perf_counter()

        def evaluate(self, trainer: Any, pl_module: Any, on_step: bool = True) -> dict[str, float]:
            record = super().evaluate(trainer, pl_module, on_step)
            seconds = time.perf_counter() - self.fit_start - self.eval_seconds
            log_at_env_step(trainer, {"bench/train_seconds": seconds}, pl_module.env_steps)
            return record

    args = ["--config", str(REPO / "configs" / config), "--seed_everything", seed, "--trainer.callbacks", "[]"]
    args += ["--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false"]
    args += ["--trainer.enable_model_summary", "false", "--trainer.default_root_dir", logdir]
    args += ["--trainer.logger.init_args.save_dir", logdir, "--trainer.logger.init_args.version", version]
    class TrainStart(Callback):
        """When training starts: after ``setup`` (envs built, model placed), as SB3's clock starts at ``learn``."""

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.wall, self.cpu = time.perf_counter(), cpu_seconds()

    cli = cli_main([*args, *extra], run=False)
    train_start = TrainStart()
    cli.trainer.callbacks.append(train_start)
    timed = None
    if json.loads(evaluation):
        timed = TimedEvaluation(**json.loads(evaluation))
        cli.trainer.callbacks.append(timed)
    start = time.perf_counter()
    cli.trainer.fit(cli.model, cli.datamodule)
    end, cpu = time.perf_counter(), cpu_seconds()  # actors gone; the fork server, holding their seconds, not yet
    eval_seconds = timed.eval_seconds if timed else 0.0
    out = {"env_steps": int(cli.datamodule.env_steps), "fit_seconds": end - train_start.wall,
           "setup_seconds": train_start.wall - start, "cpu_seconds": cpu - train_start.cpu,
           "eval_seconds": eval_seconds, "run_dir": str(Path(cli.trainer.logger.log_dir))}  # fmt: skip
    print("BENCH " + json.dumps(out), flush=True)


# ----------------------------------------------------------------------------------------------------------------
# measured subprocesses
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class Run:
    section: str
    side: str
    seed: int
    env_steps: int
    train_seconds: float  # training wall, evaluation out
    cpu_seconds: float  # CPU over the same span (nan where not measurable)
    proc_seconds: float  # the subprocess's wall, start-up included
    proc_cpu: float  # the subprocess's and its descendants' CPU
    load: float  # mean 1-minute load average while it ran
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.env_steps / self.train_seconds


def measured(cmd: list[str], cwd: Path | None = None, timeout: float | None = None) -> tuple[str, float, float, float]:
    """Run ``cmd``; its stdout, wall seconds, CPU seconds (itself and descendants) and mean load average."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with LoadSampler() as load:
        before, start = children_cpu_seconds(), time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
        wall, cpu = time.perf_counter() - start, children_cpu_seconds() - before
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc.stdout, wall, cpu, load.mean


def scalars(run_dir: str | Path) -> dict[str, list[Any]]:
    """Every scalar series of a TensorBoard run directory, by tag (TensorBoard's own loader)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: acc.Scalars(tag) for tag in acc.Tags()["scalars"]}


def ours(section: str, side_name: str, seed: int, out: Path, extra: list[str], evaluation: dict | None = None) -> Run:
    """One fit of the section's config with ``num_actors=N`` (``side_name`` "N", or "Ns": N actors with
    ``actor_env_splits: 2``; "Nr": N actors on Ray, ``actor_backend: ray`` with a local Ray instance; "N@FILE":
    another bundled config, e.g. "1@ppo_halfcheetah_async.yaml"); perf and eval series read from its events."""
    side_name, _, config = side_name.partition("@")
    actors, suffix = int(side_name.rstrip("sr")), side_name.lstrip("0123456789")
    splits, ray = 2 if "s" in suffix else 1, "r" in suffix
    side = "serial" if actors == 0 else f"async {actors}" + (" split" if splits == 2 else "") + (" ray" if ray else "")
    side += f" {Path(config).stem}" if config else ""
    version = f"{section}_a{side_name}{'_' + Path(config).stem if config else ''}_s{seed}"
    spec = json.dumps(evaluation or {})
    cmd = [sys.executable, __file__, "_fit", config or CONFIGS[section], str(seed), str(out), version, spec]
    cmd += ["--data.init_args.num_actors", str(actors), *extra]
    cmd += ["--data.init_args.actor_env_splits", "2"] if splits == 2 else []  # DreamerV3's datamodule has no splits
    cmd += ["--data.init_args.actor_backend", "ray"] if ray else []
    cmd += OURS_EXTRA
    stdout, wall, cpu, load = measured(cmd, cwd=out)
    row = json.loads(next(line for line in stdout.splitlines() if line.startswith("BENCH "))[6:])
    series = scalars(row["run_dir"])
    extra_out: dict[str, Any] = {"run_dir": row["run_dir"]}
    for tag in ("perf/actor_busy", "perf/learner_busy"):
        if tag in series:
            extra_out[tag] = statistics.median(e.value for e in series[tag])
    if "policy/lag" in series:
        extra_out["lag_max"] = max(e.value for e in series["policy/lag"])
    if "eval/episode_return" in series:
        seconds = {e.step: e.value for e in series.get("bench/train_seconds", [])}
        extra_out["evals"] = [(e.step, e.value, seconds.get(e.step)) for e in series["eval/episode_return"]]
    train = row["fit_seconds"] - row["eval_seconds"]
    run = Run(section, side, seed, row["env_steps"], train, row["cpu_seconds"], wall, cpu, load, extra_out)
    print(f"  [{section} {side} seed {seed}] {run.env_steps:,} env steps, {train:.1f} s train, {run.rate:,.0f}/s, "
          f"CPU {run.cpu_seconds:.1f} s, setup {row['setup_seconds']:.1f} s, load {load:.1f}", flush=True)  # fmt: skip
    return run


def sb3(section: str, args: argparse.Namespace, seed: int, mode: str, *peer_args: str) -> Run:
    env = "halfcheetah" if section == "halfcheetah" else "breakout"
    cmd = [args.sb3_python, str(SB3), mode, "--env", env, "--seed", str(seed), *peer_args]
    stdout, wall, cpu, load = measured(cmd)
    row = json.loads(stdout.strip().splitlines()[-1])
    extra = {"crossed": row.get("crossed"), "history": row.get("history")}
    run = Run(section, "SB3", seed, int(row["env_steps"]), row["train_seconds"], row["cpu_seconds"], wall, cpu, load,
              extra)  # fmt: skip
    print(f"  [{section} SB3 seed {seed}] {run.env_steps:,} env steps, {run.train_seconds:.1f} s train, "
          f"{run.rate:,.0f}/s, load {load:.1f}", flush=True)  # fmt: skip
    return run


def sample_factory(args: argparse.Namespace, seed: int, out: Path, env_steps: int, timeout: float | None) -> Run:
    """Sample Factory 2.1's MuJoCo example on HalfCheetah for ``env_steps``, through ``peers/sample_factory_ppo.py``
    in its own venv (its defaults: 8 workers × 8 envs, HalfCheetah-v4); its time to a training-episode mean of 3,000
    (``reward/reward``, the last 100 episodes) counted from the peer's start."""
    cmd = [args.sf_python, str(SAMPLE_FACTORY), "train", "--env", "halfcheetah", "--seed", str(seed)]
    cmd += ["--total-env-steps", str(env_steps), "--train-dir", str(out / "sf"), "--target", str(CHEETAH_TARGET)]
    stdout, wall, cpu, load = measured(cmd, timeout=timeout)
    row = json.loads(stdout.strip().splitlines()[-1])
    crossed = tuple(row["crossed"]) if row["crossed"] else None
    extra = {"crossed": crossed, "final": row["final"], "history": row["history"]}
    run = Run("halfcheetah", "Sample Factory", seed, int(row["env_steps"]), row["train_seconds"], row["cpu_seconds"],
              wall, cpu, load, extra)  # fmt: skip
    print(f"  [halfcheetah SF seed {seed}] {run.env_steps:,} env steps in {run.train_seconds:.1f} s, "
          f"CPU {run.cpu_seconds:.1f} s, to 3,000: {crossed}", flush=True)  # fmt: skip
    return run


# ----------------------------------------------------------------------------------------------------------------
# sections
# ----------------------------------------------------------------------------------------------------------------
def halfcheetah(args: argparse.Namespace, seed: int, out: Path) -> list[Run]:
    steps = args.full_steps if args.full else args.cheetah_steps
    evaluation = {"every_n_env_steps": CHEETAH_EVAL_EVERY, "num_episodes": 5} if args.full else None
    runs = [ours("halfcheetah", n, seed, out, ["--data.init_args.total_env_steps", str(steps)], evaluation)
            for n in args.actors_for("halfcheetah")]  # fmt: skip
    if args.sb3_python and args.full:
        solve = ["--eval-every", str(CHEETAH_EVAL_EVERY), "--eval-episodes", "5", "--target", str(CHEETAH_TARGET)]
        runs.append(sb3("halfcheetah", args, seed, "solve", *solve, "--total-env-steps", str(steps)))
    elif args.sb3_python:
        runs.append(sb3("halfcheetah", args, seed, "train", "--total-env-steps", str(steps)))
    if args.sf_python:
        runs.append(sample_factory(args, seed, out, args.sf_steps if args.full else steps, None))
    return runs


def breakout(args: argparse.Namespace, seed: int, out: Path) -> list[Run]:
    steps = args.full_steps if args.full else args.breakout_steps
    extra = ["--data.init_args.total_env_steps", str(steps)]
    # --full: the config's own evaluation (8 sampled whole games every 100k agent steps)
    evaluation = {"every_n_env_steps": 100_000, "num_episodes": 8, "deterministic": False, "max_steps": 27_000}
    evaluation = evaluation if args.full else None
    runs = [ours("breakout", n, seed, out, extra, evaluation) for n in args.actors_for("breakout")]
    if args.sb3_python:
        vec = ["--vec", args.sb3_vec, "--threads", "2"]
        runs.append(sb3("breakout", args, seed, "train", "--total-env-steps", str(steps), *vec,
                        *(["--eval-episodes", "8"] if args.full else [])))  # fmt: skip
    return runs


def hearts(args: argparse.Namespace, seed: int, out: Path) -> list[Run]:
    extra = ["--data.init_args.total_env_steps", str(args.hearts_steps)]
    return [ours("hearts", n, seed, out, extra) for n in args.actors_for("hearts")]


def connect_four(args: argparse.Namespace, seed: int, out: Path) -> list[Run]:
    budget = time.strftime("00:%H:%M:%S", time.gmtime(args.c4_seconds))
    extra = ["--trainer.max_time", budget]
    return [ours("connect_four", n, seed, out, extra) for n in args.actors_for("connect_four")]


def dreamer(args: argparse.Namespace, seed: int, out: Path, section: str = "dreamer") -> list[Run]:
    """DreamerV3 on CPU at its replay ratio, ``--dreamer-steps`` env steps with one evaluation at the end (the same
    env steps on every side: the returns are compared there). Serial sides get their busy shares from the engine's
    own timers: the actor window's and the learner's milliseconds per cycle (``perf/actor_ms``, ``perf/learner_ms``),
    each over their sum, which is what overlap could hide at most."""
    steps = args.dreamer_steps
    evaluation = {"every_n_env_steps": steps, "num_episodes": 10}
    extra = ["--data.init_args.total_env_steps", str(steps)]
    runs = [ours(section, n, seed, out, extra, evaluation) for n in args.actors_for(section)]
    for run in runs:
        series = scalars(run.extra.pop("run_dir"))
        if run.side == "serial" and "perf/actor_ms" in series and "perf/learner_ms" in series:
            actor = statistics.median(e.value for e in series["perf/actor_ms"])
            learner = statistics.median(e.value for e in series["perf/learner_ms"])
            run.extra["perf/actor_busy"] = actor / (actor + learner)
            run.extra["perf/learner_busy"] = learner / (actor + learner)
        print(
            f"  [{section} {run.side} seed {seed}] return at {steps:,}: "
            f"{run.extra['evals'][-1][1] if run.extra.get('evals') else float('nan'):.1f}",
            flush=True,
        )
    return runs


def dreamer_pendulum(args: argparse.Namespace, seed: int, out: Path) -> list[Run]:
    return dreamer(args, seed, out, "dreamer_pendulum")


# ----------------------------------------------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------------------------------------------
def med(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def print_table(runs: list[Run]) -> None:
    print("\n== Collection beside learning: medians over seeds (per-seed rates in brackets) ==")
    head = f"{'section':<13}{'side':<32}{'steps/s':>8}  {'per seed':<22}{'x serial':>9}{'x peer':>8}"
    head += f"{'train s':>9}{'CPU s':>8}{'proc s':>8}{'proc CPU':>9}{'actor busy':>11}{'learner':>8}"
    head += f"{'lag':>4}{'load':>6}"
    print(head)
    for section in dict.fromkeys(r.section for r in runs):
        mine = [r for r in runs if r.section == section]
        serial = med([r.rate for r in mine if r.side == "serial"])
        peer = med([r.rate for r in mine if r.side == "SB3"])
        for side in dict.fromkeys(r.side for r in mine):
            rs = [r for r in mine if r.side == side]
            rate = med([r.rate for r in rs])
            per = "[" + ", ".join(f"{r.rate:,.0f}" for r in rs) + "]"
            busy = med([r.extra.get("perf/actor_busy", float("nan")) for r in rs])
            learner = med([r.extra.get("perf/learner_busy", float("nan")) for r in rs])
            lag = max((r.extra.get("lag_max", float("nan")) for r in rs), default=float("nan"))
            print(f"{section:<13}{side:<32}{rate:>8,.0f}  {per:<22}{rate / serial:>9.2f}{rate / peer:>8.2f}"
                  f"{med([r.train_seconds for r in rs]):>9.1f}{med([r.cpu_seconds for r in rs]):>8.1f}"
                  f"{med([r.proc_seconds for r in rs]):>8.1f}{med([r.proc_cpu for r in rs]):>9.1f}"
                  f"{busy:>11.2f}{learner:>8.2f}{lag:>4.0f}{med([r.load for r in rs]):>6.1f}")  # fmt: skip
    print_learning([r for r in runs if "evals" in r.extra or r.side in ("SB3", "Sample Factory")])


def print_learning(runs: list[Run]) -> None:
    """``--full``: each run's first evaluation >= 3,000 (HalfCheetah) and its last evaluation."""
    learned = [r for r in runs if r.extra.get("evals") or r.extra.get("history") or r.extra.get("crossed")]
    if not learned:
        return
    print("\n== Learning: training seconds to the first evaluation >= 3,000 (HalfCheetah --full), last evaluation ==")
    crossed: dict[str, dict[int, float]] = defaultdict(dict)  # side -> seed -> training seconds to 3,000
    for r in learned:
        evals = r.extra.get("evals") or [(s, v, None) for s, v in (r.extra.get("history") or [])]
        first = next(((s, t) for s, v, t in evals if v >= CHEETAH_TARGET), None)
        if r.side == "SB3" and r.extra.get("crossed"):
            first = (r.env_steps, r.train_seconds)
        if r.side == "Sample Factory":
            first, evals = r.extra["crossed"], [(r.env_steps, r.extra["final"], None)]
        last = f"{evals[-1][1]:,.1f} at {evals[-1][0]:,}" if evals and evals[-1][1] is not None else "-"
        cross = f"{first[1]:,.0f} s at {first[0]:,} env steps" if first and first[1] is not None else "not reached"
        cross = f"to 3,000 {cross}; " if r.section == "halfcheetah" else ""
        print(f"  {r.section:<12} {r.side:<32} seed {r.seed}: {cross}last {last}")
        if r.section == "halfcheetah" and first and first[1] is not None:
            crossed[r.side][r.seed] = first[1]
    peer = crossed.get("SB3", {})
    for side, seconds in crossed.items():
        ratios = [seconds[seed] / peer[seed] for seed in seconds if seed in peer]
        if side != "SB3" and ratios:
            print(
                f"  halfcheetah  {side:<32} seconds to 3,000 / SB3's, per seed "
                f"{', '.join(f'{x:.2f}' for x in ratios)}; median {statistics.median(ratios):.2f}"
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_fit":
        child_fit(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    parser.add_argument("--seeds", default="0", help="comma list; every side of a section runs per seed in turn")
    parser.add_argument(
        "--actors",
        default=None,
        help="sides, e.g. 0,1,1s,1r (0 serial; 1s: 1 actor, env splits 2; 1r: 1 actor on Ray; "
        "1@ppo_halfcheetah_async.yaml: 1 actor, another bundled config)",
    )
    parser.add_argument("--quick", action="store_true", help="short budgets: check every section runs")
    parser.add_argument("--full", action="store_true", help="halfcheetah: time to 3,000 and 1M; breakout: 1M curve")
    parser.add_argument("--sb3-python", default="/work/peers/sb3/bin/python", help="'' leaves SB3 out")
    parser.add_argument("--sb3-vec", default="dummy", choices=["dummy", "subproc"], help="SB3's Breakout VecEnv")
    parser.add_argument("--sf-python", default="/work/peers/sf/bin/python", help="'' leaves Sample Factory out")
    parser.add_argument("--full-steps", type=int, default=1_000_000, help="--full: our and SB3's env steps")
    parser.add_argument("--sf-steps", type=int, default=1_000_000, help="--full: Sample Factory's env steps")
    parser.add_argument("--cheetah-steps", type=int, default=50_176, help="halfcheetah throughput env steps")
    parser.add_argument("--breakout-steps", type=int, default=50_176, help="breakout throughput agent steps")
    parser.add_argument("--hearts-steps", type=int, default=300_032, help="hearts env steps (decisions)")
    parser.add_argument("--dreamer-steps", type=int, default=6144, help="dreamer sections: env steps per fit")
    parser.add_argument("--c4-seconds", type=int, default=120, help="connect_four: the fit's wall budget")
    parser.add_argument("--out", type=Path, default=None, help="log directory (default: a new temporary one)")
    parser.add_argument("--ours-extra", default="", help="options added to each of our fits, e.g. '--num_threads 1'")
    args = parser.parse_args()
    OURS_EXTRA.extend(args.ours_extra.split())
    if args.quick:
        args.cheetah_steps, args.breakout_steps, args.hearts_steps = 4096, 4096, 16_384
        args.sf_steps, args.c4_seconds, args.full_steps, args.dreamer_steps = 40_000, 45, 20_480, 2048
    sides = None if args.actors is None else args.actors.split(",")
    args.actors_for = lambda section: sides if sides is not None else DEFAULT_ACTORS[section]
    for name in ("sb3_python", "sf_python"):
        if getattr(args, name) and not Path(getattr(args, name)).exists():
            setattr(args, name, "")
    out = args.out or Path(tempfile.mkdtemp(prefix="rl_lightning_async_"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"logs in {out}; load average {os.getloadavg()}", flush=True)
    functions = {"halfcheetah": halfcheetah, "breakout": breakout, "hearts": hearts, "connect_four": connect_four,
                 "dreamer": dreamer, "dreamer_pendulum": dreamer_pendulum}  # fmt: skip
    runs: list[Run] = []
    for section in args.sections.split(","):
        if section not in functions:
            parser.error(f"--sections {section!r}: choose from {', '.join(SECTIONS)}")
        for seed in (int(s) for s in args.seeds.split(",")):
            runs += functions[section](args, seed, out)
    print_table(runs)


if __name__ == "__main__":
    main()
