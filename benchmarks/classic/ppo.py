"""PPO benchmark: sample efficiency and wall time to target, env/collector throughput, and Trainer overhead.

    python benchmarks/classic/ppo.py                 # full run: 3 seeds × (CartPole, Pendulum, TicTacToe) + throughput
    python benchmarks/classic/ppo.py --quick         # 1 seed, shorter throughput/overhead measurements
    python benchmarks/classic/ppo.py --seeds 5 --envs cartpole --sections learning
    python benchmarks/classic/ppo.py --envs cartpole --sections repro   # same seed twice: identical evaluations?
    python benchmarks/classic/ppo.py --profile [--profile-config ppo_halfcheetah.yaml]   # where an update's time goes
    python benchmarks/classic/ppo.py --sections overhead [--overhead-config ppo_halfcheetah.yaml]

Learning runs use the bundled configs (``configs/ppo*.yaml``) unchanged, except that the logger, checkpointing,
progress bar and the configs' own callbacks are replaced by one evaluation callback that evaluates often and stops
the run the first time the target is crossed. Training time = ``trainer.fit`` wall time minus time spent in
evaluation. Run single-threaded (``torch.set_num_threads(1)``, as the configs do).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))  # benchmarks/shared: _common.py & co.
from _common import (  # first: it silences warnings and Lightning's INFO logging before they import
    RunResult,
    TargetEvaluation,
    build_cli,
    fit_with,
    overrides_to_args,
    raw_env_rate,
)
from _common import median_or_inf as _median_or_inf

# isort: split
import lightning.pytorch as pl
import torch
from _bare_ppo import hand_written_update
from _cartpole_peer import print_peer as print_cartpole_peer
from _cartpole_peer import run_peer as run_cartpole_peer
from _profile import Part, profile_fit
from tensordict import TensorDict

from rl_lightning.algos import PPO
from rl_lightning.algos.optimizer_steps import OptimizerSteps
from rl_lightning.callbacks import Evaluation
from rl_lightning.data.collector import Collector
from rl_lightning.data.fused_collector import FusedCollector
from rl_lightning.envs import CartPole
from rl_lightning.envs.base import BatchedEnv
from rl_lightning.networks.normalizers import DictObservationNormalizer, ObservationNormalizer
from rl_lightning.objectives.ppo import ppo_loss


# ----------------------------------------------------------------------------------------------------------------
# Learning: env steps and training time to the first crossing of a target
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Task:
    name: str
    config: str
    metric: str  # "return": mean episode return; "win_or_draw": fraction of episodes with return >= 0
    target: float
    num_episodes: int
    every_n_env_steps: int
    max_median_env_steps: int | None = None  # PASS criterion on the median crossing (None: just reach it)
    max_median_train_seconds: float | None = None


TASKS = {
    "cartpole": Task("CartPole", "ppo.yaml", "return", 475.0, 20, 1024, 30_000, 10.0),
    "pendulum": Task("Pendulum", "ppo_pendulum.yaml", "return", -250.0, 10, 4096, 300_000),
    "tictactoe": Task("TicTacToe", "ppo_tictactoe.yaml", "win_or_draw", 0.95, 200, 4096),
}


def run_learning(task: Task, seed: int, extra: list[str] | None = None) -> RunResult:
    callback = TargetEvaluation(
        task.metric,
        task.target,
        every_n_env_steps=task.every_n_env_steps,
        num_episodes=task.num_episodes,
        deterministic=True,
    )
    return fit_with(task.config, seed, callback, extra)


def print_learning(results: dict[str, list[RunResult]], verbose: bool) -> bool:
    header = (
        f"{'env':<10} {'seed':>4} {'target':>8} {'crossed':>7} {'env_steps':>10} {'train_s':>8} {'eval_s':>7} "
        f"{'fit_s':>7} {'best':>8} {'last':>8}"
    )
    print("\n== Learning: first crossing of the eval target (configs/ppo*.yaml; train_s = fit_s - eval_s) ==")
    print(header)
    print("-" * len(header))
    all_pass = True
    verdicts = []
    for key, runs in results.items():
        task = TASKS[key]
        for r in runs:
            steps = f"{r.env_steps}" if r.crossed else f">{r.total_env_steps}"
            print(
                f"{task.name:<10} {r.seed:>4} {task.target:>8.2f} {'yes' if r.crossed else 'NO':>7} {steps:>10} "
                f"{r.train_seconds:>8.2f} {r.eval_seconds:>7.2f} {r.fit_seconds:>7.2f} {r.best_score:>8.2f} "
                f"{r.final_score:>8.2f}"
            )
        med_steps = _median_or_inf([r.env_steps for r in runs])
        med_train = _median_or_inf([r.train_seconds if r.crossed else None for r in runs])
        med_eval = statistics.median([r.eval_seconds for r in runs])
        med_fit = statistics.median([r.fit_seconds for r in runs])
        n_crossed = sum(r.crossed for r in runs)
        steps_txt = f"{med_steps:.0f}" if med_steps != float("inf") else "never"
        print(
            f"{task.name:<10} {'med':>4} {task.target:>8.2f} {f'{n_crossed}/{len(runs)}':>7} {steps_txt:>10} "
            f"{med_train:>8.2f} {med_eval:>7.2f} {med_fit:>7.2f}"
        )
        print("-" * len(header))
        ok = n_crossed == len(runs)
        criteria = [f"{n_crossed}/{len(runs)} seeds reach {task.metric} >= {task.target:g}"]
        if task.max_median_env_steps is not None:
            ok &= med_steps <= task.max_median_env_steps
            criteria.append(f"median env steps {steps_txt} <= {task.max_median_env_steps}")
        if task.max_median_train_seconds is not None:
            ok &= med_train <= task.max_median_train_seconds
            criteria.append(f"median train time {med_train:.2f}s <= {task.max_median_train_seconds:g}s")
        all_pass &= ok
        verdicts.append(f"  {'PASS' if ok else 'FAIL'}  {task.name}: " + "; ".join(criteria))
    print("\n".join(verdicts))
    if verbose:
        for key, runs in results.items():
            for r in runs:
                curve = " ".join(f"{int(h['env_steps'])}:{h['score']:.2f}" for h in r.history)
                print(f"  curve {TASKS[key].name} seed {r.seed}: {curve}")
    return all_pass


def run_repro(task: Task, seed: int, extra: list[str] | None = None) -> tuple[bool, list[float], list[float]]:
    """The same seeded run twice in this process: every evaluation (env steps and return) must be identical."""
    first, second = (run_learning(task, seed, extra) for _ in range(2))

    def curve(r: RunResult) -> list[float]:
        return [v for h in r.history for v in (h["env_steps"], h["eval/episode_return"])]

    return curve(first) == curve(second), curve(first), curve(second)


def print_repro(task: Task, seed: int, same: bool, first: list[float], second: list[float]) -> None:
    print(f"\n== Reproducibility: {task.name} seed {seed} run twice (fresh CLI each time), evaluation by evaluation ==")
    for name, curve in (("first", first), ("second", second)):
        points = " ".join(f"{int(curve[i])}:{curve[i + 1]:.2f}" for i in range(0, len(curve), 2))
        print(f"  {name:<6} {points}")
    print(f"  {'PASS' if same else 'FAIL'}  identical evaluation histories")


# ----------------------------------------------------------------------------------------------------------------
# Throughput: raw BatchedEnv.step vs Collector.rollout with the PPO module's act vs the fused step, eager and compiled
# ----------------------------------------------------------------------------------------------------------------
THROUGHPUT_SIZES = (1, 64, 1024, 4096)


def _steps_for(num_envs: int, quick: bool) -> int:
    budget = 60_000 if quick else 200_000  # transitions per measurement
    return max(64, min(4_000, budget // num_envs))


def act_rate(module: PPO, num_envs: int, steps: int) -> float:
    """The policy alone (``module.act`` on a fixed observation batch), for attributing the collector's cost."""
    env = BatchedEnv(CartPole(), num_envs, "cpu", seed=0)
    obs = env.reset()
    generator = torch.Generator().manual_seed(2)
    for _ in range(10):
        module.act(obs, generator)
    start = time.perf_counter()
    for _ in range(steps):
        module.act(obs, generator)
    seconds = time.perf_counter() - start
    env.close()
    return steps * num_envs / seconds


def collector_rate(module: PPO, num_envs: int, steps: int, num_steps: int = 128) -> float:
    collector = Collector(BatchedEnv(CartPole(), num_envs, "cpu", seed=0), seed=3)
    chunk = min(num_steps, steps)
    collector.rollout(module.act, min(chunk, 16), 0)  # warm-up
    done = 0
    start = time.perf_counter()
    while done < steps:
        collector.rollout(module.act, chunk, 0)
        done += chunk
    seconds = time.perf_counter() - start
    collector.close()
    return done * num_envs / seconds


def fused_collector(module: PPO, num_envs: int, compile: bool, num_steps: int) -> tuple[FusedCollector, float]:
    """A fused collector after one warm-up rollout of the measured length; returns it and the warm-up's seconds
    (for ``compile=True``: the compile, cold or from inductor's on-disk cache)."""
    collector = FusedCollector(BatchedEnv(CartPole(), num_envs, "cpu", seed=0), seed=3, compile=compile)
    start = time.perf_counter()
    collector.rollout(module, num_steps, 0)
    return collector, time.perf_counter() - start


def fused_rate(collector: FusedCollector, module: PPO, steps: int, num_steps: int) -> float:
    """``FusedCollector.rollout`` env steps/s over ``steps`` ticks in rollouts of ``num_steps``."""
    done = 0
    start = time.perf_counter()
    while done < steps:
        collector.rollout(module, num_steps, 0)
        done += num_steps
    return done * collector.num_envs / (time.perf_counter() - start)


def run_throughput(quick: bool) -> list[dict[str, float]]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    module = PPO(env_spec=CartPole().spec)  # default (64, 64) tanh actor/critic, like configs/ppo.yaml
    rows = []
    repeats = 2 if quick else 3
    for num_envs in THROUGHPUT_SIZES:
        steps = _steps_for(num_envs, quick)
        chunk = min(128, steps)
        eager, _ = fused_collector(module, num_envs, False, chunk)
        compiled, compile_seconds = fused_collector(module, num_envs, True, chunk)
        raw, act, coll, fused, fast = [], [], [], [], []
        for _ in range(repeats):  # interleaved, best of `repeats`: the machine may be shared, noise only slows
            raw.append(raw_env_rate(num_envs, steps))
            act.append(act_rate(module, num_envs, steps))
            coll.append(collector_rate(module, num_envs, steps))
            fused.append(fused_rate(eager, module, steps, chunk))
            fast.append(fused_rate(compiled, module, steps, chunk))
        rows.append(
            {
                "num_envs": num_envs,
                "raw": max(raw),
                "act": max(act),
                "collector": max(coll),
                "fused": max(fused),
                "compiled": max(fast),
                "compile_s": compile_seconds,
            }
        )
    return rows


def print_throughput(rows: list[dict[str, float]]) -> None:
    print(
        "\n== Throughput on CartPole (env steps/s, 1 thread): raw BatchedEnv.step, Collector.rollout(PPO.act), "
        "FusedCollector eager and compiled =="
    )
    header = (
        f"{'num_envs':>8} {'raw env':>12} {'act only':>12} {'collector':>12} {'fused eager':>12} "
        f"{'fused comp.':>12} {'comp/coll':>9} {'comp/fused':>10} {'compile s':>9} {'us/step coll':>12} "
        f"{'us/step comp':>12}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        n = r["num_envs"]
        print(
            f"{n:>8} {r['raw']:>12,.0f} {r['act']:>12,.0f} {r['collector']:>12,.0f} {r['fused']:>12,.0f} "
            f"{r['compiled']:>12,.0f} {r['compiled'] / r['collector']:>9.2f} {r['compiled'] / r['fused']:>10.2f} "
            f"{r['compile_s']:>9.1f} {1e6 * n / r['collector']:>12.1f} {1e6 * n / r['compiled']:>12.1f}"
        )
    print(
        "  (best of interleaved repeats; us/step = wall time of one batched step of all envs; 'act only' = PPO.act on "
        "a fixed batch, no env; compile s = the compiled collector's first rollout, compile included: cold, or "
        "from inductor's on-disk cache when an earlier process compiled the same graph)"
    )


# ----------------------------------------------------------------------------------------------------------------
# Update scaling: PPO.update on rollouts of 1 to 4,096 envs
# ----------------------------------------------------------------------------------------------------------------
SCALING_STEPS, SCALING_EPOCHS, SCALING_MINIBATCHES = 32, 4, 4


def update_rate(num_envs: int, repeats: int) -> dict[str, float]:
    """``PPO.update`` (default module, CartPole) on a processed ``[32, num_envs]`` rollout: 4 epochs × 4 minibatches,
    fused Adam from ``configure_optimizers``; best of ``repeats`` timed updates after one warm-up."""
    torch.manual_seed(0)
    module = PPO(env_spec=CartPole().spec, update_epochs=SCALING_EPOCHS, num_minibatches=SCALING_MINIBATCHES)
    optimizer = module.configure_optimizers()
    collector = Collector(BatchedEnv(CartPole(), num_envs, "cpu", seed=0), seed=3)
    batch = module.process_rollout(collector.rollout(module.act, SCALING_STEPS, 0))
    collector.close()
    module.update(batch, optimizer)  # warm-up (Adam's state)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        module.update(batch, optimizer)
        best = min(best, time.perf_counter() - start)
    rows = SCALING_STEPS * num_envs
    return {"num_envs": num_envs, "rows": rows, "minibatch": rows // SCALING_MINIBATCHES, "seconds": best}


def run_update_scaling(quick: bool) -> list[dict[str, float]]:
    torch.set_num_threads(1)
    return [update_rate(n, 2 if quick else 5) for n in THROUGHPUT_SIZES]


def print_update_scaling(rows: list[dict[str, float]]) -> None:
    steps = SCALING_EPOCHS * SCALING_MINIBATCHES
    print(f"\n== PPO.update scaling on CartPole (1 thread): rollout [{SCALING_STEPS}, num_envs], "
          f"{SCALING_EPOCHS} epochs x {SCALING_MINIBATCHES} minibatches = {steps} optimiser steps ==")  # fmt: skip
    header = (
        f"{'num_envs':>8} {'rows':>8} {'minibatch':>9} {'ms/update':>10} {'ms/opt step':>11} {'µs/row':>8} "
        f"{'env steps/s':>12}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        ms = 1e3 * r["seconds"]
        print(f"{r['num_envs']:>8,} {r['rows']:>8,} {r['minibatch']:>9,} {ms:>10.2f} {ms / steps:>11.3f} "
              f"{1e6 * r['seconds'] / r['rows']:>8.2f} {r['rows'] / r['seconds']:>12,.0f}")  # fmt: skip
    print("  (env steps/s = rollout rows per second of update: the update's cost per collected env step)")


# ----------------------------------------------------------------------------------------------------------------
# Trainer overhead: a PPO update inside Trainer.fit vs the same update in a bare Python loop
# ----------------------------------------------------------------------------------------------------------------
class StepTimer(pl.Callback):
    """Times each training_step (batch start → end) and the gap between steps, and stops after ``num_updates``."""

    def __init__(self, num_updates: int) -> None:
        self.num_updates = num_updates
        self.step_seconds: list[float] = []
        self.collect_seconds: list[float] = []
        self.gap_seconds: list[float] = []
        self._start: float | None = None
        self._end: float | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        now = time.perf_counter()
        if self._end is not None:
            self.gap_seconds.append(now - self._end)
        self._start = now

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        assert self._start is not None
        self._end = time.perf_counter()
        self.step_seconds.append(self._end - self._start)
        self.collect_seconds.append(trainer.datamodule.collector.last_collect_seconds)
        if pl_module.updates >= self.num_updates:
            trainer.should_stop = True


def run_overhead(quick: bool, config: str = "ppo.yaml") -> dict[str, Any]:
    """Each PPO.update inside Trainer.fit is paired with a bare-loop update run right after it (same time window,
    so a shared machine's noise hits both alike): a copy of the initial module never attached to a Trainer, a
    plain ``torch.optim.Adam`` from its ``configure_optimizers``, and the first processed rollout of the fit."""
    torch.set_num_threads(1)
    num_updates = 20 if quick else 60
    cli = build_cli(config, seed=0)
    module: PPO = cli.model
    fresh = copy.deepcopy(module)  # identical initial weights, never attached to a Trainer
    fresh.generator.manual_seed(0)
    bare_optimizer = fresh.configure_optimizers()
    hand = copy.deepcopy(module)  # the same again, for the hand-written update
    hand.generator.manual_seed(0)
    hand_optimizer = hand.configure_optimizers()

    fit_seconds_list: list[float] = []
    bare_seconds_list: list[float] = []
    hand_seconds_list: list[float] = []
    captured: list[TensorDict] = []
    original_update = module.update

    def timed_update(batch: TensorDict, optimizer: Any) -> TensorDict:
        if not captured:
            captured.append(batch.clone())
        start = time.perf_counter()
        out = original_update(batch, optimizer)
        fit_seconds_list.append(time.perf_counter() - start)
        start = time.perf_counter()
        fresh.update(captured[0], bare_optimizer)
        bare_seconds_list.append(time.perf_counter() - start)
        start = time.perf_counter()
        hand_written_update(hand, captured[0], hand_optimizer)
        hand_seconds_list.append(time.perf_counter() - start)
        return out

    module.update = timed_update  # type: ignore[method-assign]
    timer = StepTimer(num_updates)
    cli.trainer.callbacks.insert(0, timer)
    start = time.perf_counter()
    cli.trainer.fit(module, cli.datamodule)
    fit_wall = time.perf_counter() - start - sum(bare_seconds_list) - sum(hand_seconds_list)

    hp = module.hparams
    skip = 1  # the first update includes Adam's lazy state init (both paths)
    med = statistics.median
    pairs = list(zip(fit_seconds_list, bare_seconds_list))[skip:]
    steps = [s - b - h for s, b, h in zip(timer.step_seconds, bare_seconds_list, hand_seconds_list)]
    hand_pairs = list(zip(fit_seconds_list, hand_seconds_list))[skip:]
    return {
        "config": config,
        "rollout": captured[0].numel(),
        "optimizer_steps": hp.update_epochs * hp.num_minibatches,
        "updates": len(fit_seconds_list),
        "fit_update": med(f for f, _ in pairs),
        "bare_update": med(b for _, b in pairs),
        "ratio": med(f / b for f, b in pairs),
        "hand_update": med(h for _, h in hand_pairs),
        "hand_ratio": med(f / h for f, h in hand_pairs),
        "fit_step": med(steps[skip:]),
        "collect": med(timer.collect_seconds[skip:]),
        "gap": med(timer.gap_seconds) if timer.gap_seconds else float("nan"),
        "fit_seconds": fit_wall,
        "env_steps": int(cli.datamodule.env_steps),
    }


def print_overhead(r: dict[str, Any]) -> None:
    ms = 1e3
    print(
        f"\n== Trainer overhead ({r['config']}: rollout {r['rollout']}, {r['optimizer_steps']} optimiser steps per "
        f"update; medians over {r['updates'] - 1} interleaved pairs of updates) =="
    )
    print(f"  PPO.update inside Trainer.fit        {r['fit_update'] * ms:8.2f} ms")
    print(f"  PPO.update in a bare Python loop     {r['bare_update'] * ms:8.2f} ms")
    print(f"  ratio fit / bare (median of pairs)   {r['ratio']:8.3f}")
    print(f"  hand-written update, same math       {r['hand_update'] * ms:8.2f} ms  (benchmarks/classic/_bare_ppo.py)")
    steps = r["optimizer_steps"]
    print(
        f"  ratio fit / hand-written             {r['hand_ratio']:8.3f}  (target <= 1.15; per optimiser step "
        f"{r['fit_update'] / steps * ms:.3f} vs {r['hand_update'] / steps * ms:.3f} ms)"
    )
    other = r["fit_step"] - r["collect"] - r["fit_update"]
    print(
        f"  whole training_step {r['fit_step'] * ms:.2f} ms = collect {r['collect'] * ms:.2f} + update "
        f"{r['fit_update'] * ms:.2f} + other (GAE, logging, lr) {other * ms:.2f}; loop gap between steps "
        f"{r['gap'] * ms:.2f} ms"
    )
    per_update = r["fit_seconds"] / max(r["updates"], 1)
    print(
        f"  fit wall (bare updates excluded) {r['fit_seconds']:.2f} s for {r['env_steps']} env steps "
        f"({per_update * ms:.1f} ms/update incl. setup, {r['env_steps'] / r['fit_seconds']:,.0f} env steps/s)"
    )


# ----------------------------------------------------------------------------------------------------------------
# Profile: where a PPO fit's time goes
# ----------------------------------------------------------------------------------------------------------------
PROFILE_PARTS = [
    Part("collection (Collector.rollout)", [Collector.rollout]),
    Part("acting (PPO.act)", [PPO.act], 1),
    Part("env step (BatchedEnv.step)", [BatchedEnv.step], 1),
    Part("GAE and targets (PPO.process_rollout)", [PPO.process_rollout]),
    Part("update (PPO.update)", [PPO.update]),
    Part("forward and loss", [PPO._log_prob_entropy_value, ppo_loss], 1),
    Part("backward", [OptimizerSteps.backward], 1),
    Part("gradient clip", [torch.nn.utils.clip_grad_norm_], 1),
    Part("optimiser step", [OptimizerSteps.step], 1),
    Part("observation statistics", [ObservationNormalizer.update, DictObservationNormalizer.update]),
    Part("logging (PPO._log_update)", [PPO._log_update]),
    Part("evaluation callback", [Evaluation.evaluate]),
    Part("checkpoints", [pl.Trainer.save_checkpoint]),
]


# ----------------------------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 seed (unless --seeds), shorter measurements")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 per env (default 3; 1 with --quick)")
    parser.add_argument("--seed-offset", type=int, default=0, help="first seed")
    parser.add_argument("--envs", default="cartpole,pendulum,tictactoe", help="comma list of " + ",".join(TASKS))
    parser.add_argument(
        "--sections",
        default="learning,throughput,overhead",
        help="comma list of learning,throughput,update,overhead,repro,peer (repro: the first env's first seed twice; "
        "update: PPO.update at 1-4,096 envs; peer: CartPole time to solve vs SB3, needs --peer-python)",
    )
    parser.add_argument("--verbose", action="store_true", help="print every evaluation of every run")
    parser.add_argument("--profile", action="store_true", help="only print the cProfile breakdown of a short fit")
    parser.add_argument("--profile-config", default="ppo.yaml", help="bundled config to profile (default ppo.yaml)")
    parser.add_argument("--overhead-config", default="ppo.yaml", help="bundled config of the overhead section")
    parser.add_argument("--peer-python", default=None, help="python of a venv with stable-baselines3 (section peer)")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra CLI setting for every learning run (tuning), e.g. --override model.init_args.lr=3e-4",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = args.seeds if args.seeds is not None else (1 if args.quick else 3)
    sections = set(args.sections.split(","))
    envs = [e.strip().lower() for e in args.envs.split(",") if e.strip()]
    unknown = [e for e in envs if e not in TASKS]
    if unknown:
        parser.error(f"--envs: unknown {unknown}; choose from {list(TASKS)}")
    print(
        f"rl_lightning PPO benchmark: torch {torch.__version__}, lightning {pl.__version__}, "
        f"threads {torch.get_num_threads()}, cpus {os.cpu_count()}, seeds {seeds}"
    )
    if args.profile:
        profile_fit(args.profile_config, PROFILE_PARTS, extra=overrides_to_args(args.override))
        return
    all_pass = True
    if "learning" in sections:
        results: dict[str, list[RunResult]] = {}
        for key in envs:
            results[key] = []
            for seed in range(args.seed_offset, args.seed_offset + seeds):
                r = run_learning(TASKS[key], seed, overrides_to_args(args.override))
                results[key].append(r)
                print(
                    f"  [{TASKS[key].name} seed {seed}] crossed={r.crossed} env_steps={r.env_steps} "
                    f"train={r.train_seconds:.2f}s eval={r.eval_seconds:.2f}s best={r.best_score:.2f}",
                    flush=True,
                )
        all_pass = print_learning(results, args.verbose)
    if "peer" in sections:
        if args.peer_python is None:
            parser.error("--sections peer needs --peer-python (a venv with stable-baselines3 and torch==2.13.0)")
        seed_list = list(range(args.seed_offset, args.seed_offset + seeds))
        extra = overrides_to_args(args.override)
        rows = run_cartpole_peer(seed_list, args.peer_python, lambda s: run_learning(TASKS["cartpole"], s, extra))
        all_pass &= print_cartpole_peer(rows)
    if "repro" in sections:
        seed = args.seed_offset
        same, first, second = run_repro(TASKS[envs[0]], seed, overrides_to_args(args.override))
        print_repro(TASKS[envs[0]], seed, same, first, second)
        all_pass &= same
    if "throughput" in sections:
        print_throughput(run_throughput(args.quick))
    if "update" in sections:
        print_update_scaling(run_update_scaling(args.quick))
    if "overhead" in sections:
        print_overhead(run_overhead(args.quick, args.overhead_config))
    if sections & {"learning", "repro"}:
        print(f"\nOVERALL: {'PASS' if all_pass else 'FAIL'}")


if __name__ == "__main__":
    main()
