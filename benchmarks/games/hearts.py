"""Hearts (issue 28): where a ``ppo_hearts.yaml`` fit spends its CPU, whole fits of several seeds in parallel, and
the judge of their checkpoints (points per hand against three random seats and among three HeartsHeuristic).

    python benchmarks/games/hearts.py --sections profile --steps 20480 --encoders mlp,hearts
    python benchmarks/games/hearts.py --sections cost --encoders mlp,hearts --updates 4
    python benchmarks/games/hearts.py --sections fit --seeds 1,2,3 --jobs 3 --minutes 60 --workdir /tmp/hearts
    python benchmarks/games/hearts.py --sections judge --ckpts RUN/last.ckpt,... --hands 2000

profile: a short fit of ``ppo_hearts.yaml`` (``--steps`` env steps, each ``--encoders`` entry as
``model.encoder``) under cProfile with a CPU-time clock (``time.process_time``), so other jobs on a shared machine do
not count; prints the share of the fit's CPU in the update, the rollout (the policy's forward, the engine, league and
bot seats), evaluation and start-up.

cost: CPU milliseconds per 2,048-decision update (64 games x 32 ticks) in its three parts, the rollout, the critic
and credit (``process_rollout``) and the PPO update, per ``--encoders`` entry.

fit: ``rl-lightning fit --config ppo_hearts.yaml`` (plus ``--extra`` arguments) once per seed in ``--seeds``,
``--jobs`` at a time (one torch thread each, ``nice``), each stopped after ``--minutes`` (SIGTERM: last.ckpt is
saved); prints each run's env steps, wall, decisions per second over the whole fit, peak memory, then judges its
last checkpoint (``judge``).

clone: ``--bc-games`` HeartsHeuristic games recorded, ``bc_hearts.yaml`` for ``--bc-epochs``, then ``ppo_hearts.yaml``
from the clone's weights (plus ``--extra``: a critic warm-up, a magnet toward the clone) once per ``--seeds`` entry,
each capped at ``--minutes``; judges the clone and each PPO run, compared with the clone on the same deals.
    python benchmarks/games/hearts.py --sections clone --seeds 1,2,3 \
        --extra "--model.init_args.critic_warmup_updates 20"

judge: each checkpoint (PPO or BC) greedy in every seat in turn, over the same ``--hands`` / 4 duplicate deals:
points per hand against three random seats, and among three HeartsHeuristic with the heuristic's own points in the
same seats and deals (paired t-test over deals); each checkpoint after the first is also compared with the first
(e.g. PPO from a clone against the clone) deal by deal.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ROOT = Path(__file__).resolve().parents[2]
#: cProfile function names → the part of a fit they stand for (cumulative CPU seconds; the first match counts).
PARTS = {
    "update (PPO minibatch steps)": ("ppo_update.py", "update"),
    "process_rollout (critic forward, per-seat credit, GAE)": ("ppo_update.py", "process_rollout"),
    "rollout: learning policy forward": ("ppo_policy.py", "act_from_noise"),
    "rollout: league and bot seats": ("selfplay.py", "_opponent_act"),
    "rollout: engine step (OpenSpielEnv)": ("base.py", "step_state"),
    "rollout: whole": ("selfplay.py", "rollout"),
    "evaluation (GameEvaluation)": ("game_evaluation.py", "on_train_batch_end"),
    "fit": ("trainer.py", "fit"),
}


def run_profile(steps: int, encoders: list[str], workdir: Path) -> None:
    """CPU-time profile of a short ``ppo_hearts.yaml`` fit per encoder, one after the other in this process."""
    from rl_lightning.cli import cli_main

    for encoder in encoders:
        profiler = cProfile.Profile(time.process_time)
        args = ["fit", "--config", "ppo_hearts.yaml", "--data.init_args.total_env_steps", str(steps),
                "--model.init_args.encoder", encoder, "--trainer.logger.init_args.save_dir", str(workdir / "runs"),
                "--trainer.logger.init_args.name", f"profile_{encoder}", "--trainer.enable_progress_bar", "false"]
        start, cpu = time.perf_counter(), time.process_time()
        profiler.runcall(cli_main, args)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        stats = pstats.Stats(profiler).stats
        cumulative: dict[tuple[str, str], float] = {}
        for (path, _, name), (_, _, _, cum, _) in stats.items():
            key = (Path(path).name, name)
            cumulative[key] = max(cumulative.get(key, 0.0), cum)
        total = cumulative.get(PARTS["fit"], cpu)
        print(f"encoder={encoder}: {steps:,} env steps, {cpu:.1f} CPU s ({steps / total:,.0f} decisions per CPU "
              f"second of the fit), wall {wall:.0f} s on the shared machine")  # fmt: skip
        for label, key in PARTS.items():
            print(f"  {label:55s} {cumulative.get(key, 0.0):7.1f} CPU s  {cumulative.get(key, 0.0) / total:6.1%}")


def run_cost(encoders: list[str], updates: int) -> None:
    """CPU milliseconds per 2,048-decision update of ``ppo_hearts.yaml``'s shape (64 games x 32 ticks, every seat
    self, trick rewards), split into the rollout (policy forward and engine), ``process_rollout`` and the update."""
    import torch

    from rl_lightning.algos import PPO
    from rl_lightning.algos.ppo import TRAIN_KEY
    from rl_lightning.data.league import SeatPlayers
    from rl_lightning.data.selfplay import SelfPlayCollector
    from rl_lightning.envs.base import BatchedEnv
    from rl_lightning.envs.games import OpenSpielEnv

    for encoder in encoders:
        env = BatchedEnv(OpenSpielEnv("open_spiel:hearts", reward="trick"), 64, seed=0)
        module = PPO(env.spec, hidden_sizes=(256, 256), gamma=1.0, ent_coef=0.01, encoder=encoder)
        collector = SelfPlayCollector(env, SeatPlayers(["self"] * 4, None, env.device), seed=0)
        policy = module.acting_policy(env.env, deterministic=False, training=True)
        optimizer = torch.optim.Adam(module.parameters(), lr=3e-4, eps=1e-5, fused=True)
        collector.rollout(policy, 32, 0)  # carried rows from here on
        spent = {"rollout": 0.0, "process_rollout": 0.0, "update": 0.0}
        for _ in range(updates):
            start = time.process_time()
            batch = collector.rollout(policy, 32, module.policy_version)
            spent["rollout"] += time.process_time() - start
            start = time.process_time()
            flat = module.process_rollout(batch).reshape(-1)
            spent["process_rollout"] += time.process_time() - start
            start = time.process_time()
            module.update(flat[flat[TRAIN_KEY]], optimizer)
            spent["update"] += time.process_time() - start
        parts = ", ".join(f"{k} {v / updates * 1e3:.0f} ms" for k, v in spent.items())
        total = sum(spent.values()) / updates
        print(f"encoder={encoder}: {parts}; {total * 1e3:.0f} ms CPU per update = {2048 / total:,.0f} decisions per "
              "CPU second (no evaluation, league or logging)")  # fmt: skip


def _fit(name: str, args: list[str], work: Path, minutes: float) -> subprocess.Popen:
    """``nice rl-lightning fit ARGS`` in the background (one torch thread), stopped by ``--trainer.max_time``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}  # fmt: skip
    limit = f"00:00:{int(minutes):02d}:{int(minutes % 1 * 60):02d}"
    command = ["nice", "-n", "5", sys.executable, "-m", "rl_lightning.cli", "fit", *args, "--trainer.max_time", limit,
               "--trainer.logger.init_args.save_dir", str(work / "runs"), "--trainer.logger.init_args.version", name,
               "--trainer.enable_progress_bar", "false"]  # fmt: skip
    with open(work / f"{name}.log", "w") as log:
        print(f"{name}: {' '.join(command[3:])}", flush=True)
        process = subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    process.started = time.perf_counter()  # type: ignore[attr-defined]
    return process


def _finish(process: subprocess.Popen) -> tuple[int, float, float]:
    """Wait for a fit: ``(exit code, wall seconds, peak resident memory in GB)`` (``wait4``: this child's own)."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, time.perf_counter() - process.started, usage.ru_maxrss / 1e6  # type: ignore[attr-defined]


def _env_steps(ckpt: Path) -> int:
    import torch

    return int(torch.load(ckpt, map_location="cpu", weights_only=False)["OnPolicyDataModule"]["local_env_steps"])


def _ppo_seeds(seeds: list[int], jobs: int, minutes: float, args: list[str], work: Path, name: str) -> list[Path]:
    """``ppo_hearts.yaml`` plus ``args`` once per seed (run ``{name}_{seed}``), ``jobs`` at a time, each capped at
    ``minutes``; prints each run's env steps, whole-fit decisions per second and peak memory; their last.ckpt paths."""
    pending, running, done = list(seeds), [], []
    while pending or running:
        while pending and len(running) < jobs:
            seed = pending.pop(0)
            fit_args = ["--config", "ppo_hearts.yaml", "--seed_everything", str(seed), *args]
            running.append((seed, _fit(f"{name}_{seed}", fit_args, work, minutes)))
        seed, process = running.pop(0)
        done.append((seed, *_finish(process)))
    ckpts = []
    for seed, code, wall, memory in done:
        ckpt = work / "runs" / "ppo_hearts" / f"{name}_{seed}" / "checkpoints" / "last.ckpt"
        if code != 0 or not ckpt.is_file():
            print(f"{name} {seed}: exit {code}, no last.ckpt; see {work / f'{name}_{seed}.log'}")
            continue
        steps = _env_steps(ckpt)
        print(f"{name} {seed}: {steps:,} env steps in {wall / 60:.1f} min wall ({steps / wall:,.0f} decisions/s whole "
              f"fit, start-up and evaluations included), peak memory {memory:.2f} GB")  # fmt: skip
        ckpts.append(ckpt)
    return ckpts


def run_fits(seeds: list[int], jobs: int, minutes: float, extra: list[str], work: Path, hands: int) -> None:
    """``ppo_hearts.yaml`` once per seed, ``jobs`` at a time; whole-fit decisions per second, memory, the judge."""
    for ckpt in _ppo_seeds(seeds, jobs, minutes, extra, work, "seed"):
        judge(str(ckpt), hands, seed=0)


def run_clone(
    games: int, epochs: int, minutes: float, extra: list[str], work: Path, hands: int, seeds: list[int], jobs: int
) -> None:
    """Behaviour cloning on ``games`` HeartsHeuristic games (``bc_hearts.yaml``, recorded first), then
    ``ppo_hearts.yaml`` from the clone's weights with ``extra`` (e.g. a critic warm-up), once per seed, ``jobs`` at a
    time, each capped at ``minutes``; judges the clone and each PPO run, each compared with the clone deal by deal."""
    args = ["--config", "bc_hearts.yaml", "--data.init_args.path", str(work / f"records_{games}"),
            "--data.init_args.record_games", str(games), "--trainer.max_epochs", str(epochs)]  # fmt: skip
    code, wall, memory = _finish(_fit("clone", args, work, minutes))
    clone = work / "runs" / "bc_hearts" / "clone" / "checkpoints" / "last.ckpt"
    if code != 0 or not clone.is_file():
        raise SystemExit(f"BC failed (exit {code}); see {work / 'clone.log'}")
    print(f"BC: {games} games recorded and {epochs} epochs in {wall / 60:.1f} min, peak memory {memory:.2f} GB")
    ppo = _ppo_seeds(seeds, jobs, minutes, ["--model.init_args.init_weights", str(clone), *extra], work, "from_clone")
    run_judge([str(clone), *map(str, ppo)], hands)


def judge(ckpt: str, hands: int, seed: int) -> dict[str, Any]:
    """``ckpt`` (greedy) against three random seats and among three HeartsHeuristic, duplicate deals; returns each
    panel's per-deal points (the mean over the four seats of a deal), for paired comparisons between checkpoints."""
    import torch

    from rl_lightning.envs.games import OpenSpielEnv
    from rl_lightning.envs.games.bots import HeartsHeuristic, RandomBot
    from rl_lightning.games import PolicyBot, match_metrics, play_match
    from rl_lightning.games.panel import _load_module

    module = _load_module(ckpt, torch.device("cpu"))
    env = OpenSpielEnv("open_spiel:hearts")
    print(f"  {ckpt}: points per hand over {hands} hands ({hands // 4} deals x 4 seats; lower is better)")
    per_deal = {}
    for name, opponent in (("3 x random", RandomBot()), ("3 x HeartsHeuristic", HeartsHeuristic())):
        start = time.perf_counter()
        result = play_match(env, PolicyBot(module), opponent, hands // 4, seed=seed, batch_size=256)
        per_deal[name] = result.seat_scores("tested").double().mean(1)
        m = match_metrics(result)
        print(f"    vs {name}: {m['points_per_hand']:.2f} [{m['points_per_hand_low']:.2f}, "
              f"{m['points_per_hand_high']:.2f}]; the opponent in the same seats {m['baseline_points_per_hand']:.2f}, "
              f"paired p {m['p_value']:.2g} ({time.perf_counter() - start:.0f} s)", flush=True)  # fmt: skip
    return per_deal


def run_judge(ckpts: list[str], hands: int) -> None:
    """Judge each checkpoint on the same deals; each after the first is compared with the first, deal by deal."""
    from rl_lightning.games.stats import paired_p_value

    first = None
    for ckpt in ckpts:
        per_deal = judge(ckpt, hands, seed=0)
        if first is None:
            first = per_deal
            continue
        for name, sample in per_deal.items():
            diff = float((sample - first[name]).mean())
            print(f"    {name}: {diff:+.2f} points per hand against {ckpts[0]} on the same deals, paired p "
                  f"{paired_p_value(sample, first[name]):.2g}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="profile", help="comma list of profile,cost,fit,clone,judge")
    parser.add_argument("--steps", type=int, default=20_480, help="profile: env steps of each short fit")
    parser.add_argument("--encoders", default="mlp,hearts", help="profile, cost: model.encoder values to compare")
    parser.add_argument("--updates", type=int, default=4, help="cost: updates timed per encoder")
    parser.add_argument("--workdir", default="bench_hearts", help="runs, logs and records go here")
    parser.add_argument("--seeds", default="1", help="fit, clone: comma list of seeds (seed_everything)")
    parser.add_argument("--jobs", type=int, default=1, help="fit, clone: fits at a time (one torch thread each)")
    parser.add_argument("--minutes", type=float, default=60.0, help="fit, clone: wall-clock limit of each fit")
    parser.add_argument("--extra", default="", help="fit: further rl-lightning fit arguments, space separated")
    parser.add_argument("--bc-games", type=int, default=1000, help="clone: HeartsHeuristic games recorded")
    parser.add_argument("--bc-epochs", type=int, default=10, help="clone: BC epochs")
    parser.add_argument("--ckpts", default="", help="judge: comma list of checkpoints (PPO or BC)")
    parser.add_argument("--hands", type=int, default=2000, help="fit, judge: hands per match (a multiple of 4)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    unknown = sections - {"profile", "cost", "fit", "clone", "judge"}
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)}; choose from clone,cost,fit,judge,profile")
    if "profile" in sections:
        run_profile(args.steps, [e.strip() for e in args.encoders.split(",")], work)
    if "cost" in sections:
        run_cost([e.strip() for e in args.encoders.split(",")], args.updates)
    if "fit" in sections:
        seeds = [int(s) for s in args.seeds.split(",")]
        run_fits(seeds, args.jobs, args.minutes, shlex.split(args.extra), work, args.hands)
    if "clone" in sections:
        seeds = [int(s) for s in args.seeds.split(",")]
        extra = shlex.split(args.extra)
        run_clone(args.bc_games, args.bc_epochs, args.minutes, extra, work, args.hands, seeds, args.jobs)
    if "judge" in sections:
        run_judge([c.strip() for c in args.ckpts.split(",") if c.strip()], args.hands)


if __name__ == "__main__":
    main()
