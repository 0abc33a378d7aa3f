"""SPO benchmark: sample efficiency on CartPole (plus a negative control), TicTacToe, Pendulum; search throughput.

    python benchmarks/classic/spo.py         # full run: 3 seeds × (CartPole, control, TicTacToe, Pendulum) + throughput
    python benchmarks/classic/spo.py --quick         # 1 seed (same budgets), shorter throughput measurements
    python benchmarks/classic/spo.py --seeds 5 --envs cartpole --sections learning,control
    python benchmarks/classic/spo.py --profile       # one search piece by piece, then a short fit under cProfile

Learning runs use the bundled configs (``configs/spo*.yaml``) unchanged, except that the logger, checkpointing,
progress bar and the configs' own callbacks are replaced by one evaluation callback (SPO's default evaluation: SMC
search, acting with a draw from the search target, as published). CartPole and TicTacToe stop the first time the
target is crossed (else at the config's budget); Pendulum runs its whole budget. Training time = ``trainer.fit``
wall time minus time spent in evaluation. Run single-threaded (``torch.set_num_threads(1)``, as the configs do).

Sections:
  learning    CartPole (eval every 5k env steps on 16 episodes, stop at mean return >= 475; also the return at 10k),
              TicTacToe (win-or-draw rate over 200 games vs the random opponent, stop at >= 0.98),
              Pendulum (mean return of 10 episodes every 10k env steps up to the budget).
  control     CartPole negative control: η fixed at 1e9 (the search target is the prior, i.e. self-imitation),
              30k env steps; needs cartpole in --envs.
  scaling     (not in the default set) ms per search at E = 16 for N = 8..256 particles (depth 4) and depth
              1..8 (N = 16), float32 and bfloat16: how the cost grows with the work.
  throughput  smc_search on CartPole (via SPO.acting_policy, training=True) at E = 16 and 64 envs × N = 16
              particles × depth 4, in particle-steps/s, vs the raw BatchedEnv.step rate at the same batch E·N.

PASS criteria (spo.md §5.2): CartPole median env steps to 475 <= 60k; the control's eval return at 30k <= 60 for
every seed (the control is a control: it does not learn); per seed, the real run beats its control at 10k env steps
by at least 50 (the learning comes from the SMC weights: an SPO that cannot learn scores like its control and fails
here, while the control alone would still pass); every TicTacToe seed reaches a win-or-draw rate >= 0.98 within the
budget. CartPole's return at 10k (check (i): >= 100) and Pendulum (no target) are reported but not part of OVERALL.
The control section needs the CartPole learning runs (``--sections learning,control``). For a quick check of the
plumbing, cap both budgets: ``--override data.init_args.total_env_steps=10240``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))  # benchmarks/shared: _common.py & co.
from _common import (  # first: it silences warnings and Lightning's INFO logging before they import
    RunResult,
    TargetEvaluation,
    fit_with,
    median_or_inf,
    overrides_to_args,
    print_summary,
    raw_env_rate,
)
from _spo_profile import profile

# isort: split
import lightning.pytorch as pl
import torch

from rl_lightning import keys
from rl_lightning.algos import SPO
from rl_lightning.envs import CartPole
from rl_lightning.envs.base import BatchedEnv


# ----------------------------------------------------------------------------------------------------------------
# Learning: env steps and training time to the first crossing of a target (or a fixed-budget curve)
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Task:
    name: str
    config: str
    metric: str  # "return": mean episode return; "win_or_draw": fraction of episodes with return >= 0
    target: float | None  # stop at the first evaluation with score >= target (None: run the whole budget)
    num_episodes: int
    every_n_env_steps: int
    extra: tuple[str, ...] = ()  # CLI settings on top of the config


TASKS = {
    "cartpole": Task("CartPole", "spo.yaml", "return", 475.0, 16, 5_000),
    "tictactoe": Task("TicTacToe", "spo_tictactoe.yaml", "win_or_draw", 0.98, 200, 2_048),
    "pendulum": Task("Pendulum", "spo_pendulum.yaml", "return", None, 10, 10_000),
}
CONTROL = Task(
    "Control",
    "spo.yaml",
    "return",
    None,
    16,
    5_000,
    (
        "--model.init_args.adaptive_temperature",
        "false",
        "--model.init_args.fixed_temperature",
        "1e9",
        "--data.init_args.total_env_steps",
        "30000",
    ),
)

CARTPOLE_MAX_MEDIAN_STEPS = 60_000
CARTPOLE_CHECK_STEPS, CARTPOLE_CHECK_MIN = 10_000, 100.0  # spo.md §5.2 check (i)
CONTROL_MAX_RETURN = 60.0  # spo.md §5.2 check (iii): eval return at 30k
CONTROL_AT = (10_000, 20_000, 30_000)
CONTROL_MARGIN = 50.0  # real run minus its control at CARTPOLE_CHECK_STEPS, every seed (measured ~100-115)
PPO_PENDULUM_NOTE = "PPO (benchmarks/classic/ppo.py) reaches -250 in ~90k env steps"


def run_task(task: Task, seed: int, overrides: list[str]) -> RunResult:
    callback = TargetEvaluation(
        task.metric,
        task.target,
        every_n_env_steps=task.every_n_env_steps,
        num_episodes=task.num_episodes,
        deterministic=None,  # SPO's default: search, sampling the executed action from the target q̂
    )
    return fit_with(task.config, seed, callback, [*task.extra, *overrides])


def _fmt(value: float | None, spec: str = ".1f", none: str = "-") -> str:
    return none if value is None or value != value else format(value, spec)


def cartpole_at_check(r: RunResult) -> float | None:
    """Eval return at the first evaluation >= 10k env steps (the crossing score if it stopped before 10k)."""
    score = r.score_at(CARTPOLE_CHECK_STEPS)
    if score is None and r.crossed:
        return r.final_score
    return score


def print_learning(results: dict[str, list[RunResult]], verbose: bool) -> None:
    header = (
        f"{'env':<10} {'seed':>4} {'target':>7} {'crossed':>7} {'env_steps':>10} {'train_s':>8} {'eval_s':>7} "
        f"{'fit_s':>7} {'@10k':>8} {'best':>8} {'last':>8}"
    )
    print(
        "\n== Learning: first crossing of the eval target (configs/spo*.yaml; search eval, actions drawn from the "
        "target; train_s = fit_s - eval_s) =="
    )
    print(header)
    print("-" * len(header))
    for key, runs in results.items():
        task = TASKS[key]
        target = _fmt(task.target, ".2f")
        fmt = _score_format(task)
        for r in runs:
            if task.target is None:
                crossed, steps = "-", f"{r.total_env_steps}"
            else:
                crossed = "yes" if r.crossed else "NO"
                steps = f"{r.env_steps}" if r.crossed else f">{r.total_env_steps}"
            at10k = _fmt(cartpole_at_check(r)) if key == "cartpole" else "-"
            print(
                f"{task.name:<10} {r.seed:>4} {target:>7} {crossed:>7} {steps:>10} {r.train_seconds:>8.1f} "
                f"{r.eval_seconds:>7.1f} {r.fit_seconds:>7.1f} {at10k:>8} "
                f"{r.best_score:>8{fmt}} {r.final_score:>8{fmt}}"
            )
        if task.target is not None:
            med_steps = median_or_inf([r.env_steps for r in runs])
            med_train = median_or_inf([r.train_seconds if r.crossed else None for r in runs])
            crossed = f"{sum(r.crossed for r in runs)}/{len(runs)}"
            steps_txt = f"{med_steps:.0f}" if med_steps != float("inf") else "never"
        else:
            med_train = statistics.median([r.train_seconds for r in runs])
            crossed, steps_txt = "-", f"{statistics.median([r.total_env_steps for r in runs]):.0f}"
        med_eval = statistics.median([r.eval_seconds for r in runs])
        med_fit = statistics.median([r.fit_seconds for r in runs])
        med_best = statistics.median([r.best_score for r in runs])
        med_last = statistics.median([r.final_score for r in runs])
        print(
            f"{task.name:<10} {'med':>4} {target:>7} {crossed:>7} {steps_txt:>10} {med_train:>8.1f} {med_eval:>7.1f} "
            f"{med_fit:>7.1f} {'':>8} {med_best:>8{fmt}} {med_last:>8{fmt}}"
        )
        print("-" * len(header))
    for key, runs in results.items():
        if key == "pendulum" or verbose:
            for r in runs:
                print(f"  curve {TASKS[key].name} seed {r.seed}: {_curve(r, _score_format(TASKS[key]))}")


def _score_format(task: Task) -> str:
    return ".3f" if task.metric == "win_or_draw" else ".2f"  # rates: 0.975 must not print as 0.98


def _curve(r: RunResult, fmt: str = ".2f") -> str:
    return " ".join(f"{int(h['env_steps'])}:{h['score']:{fmt}}" for h in r.history)


def print_control(runs: list[RunResult], real: list[RunResult] | None, verbose: bool) -> None:
    print(
        "\n== Negative control on CartPole: η fixed at 1e9 (target = prior: self-imitation), 30k env steps; "
        "search eval on 16 episodes =="
    )
    cols = "".join(f"{f'@{s // 1000}k':>8}" for s in CONTROL_AT)
    header = f"{'run':<8} {'seed':>4}{cols} {'max':>8} {'train_s':>8} {'eval_s':>7}"
    print(header)
    print("-" * len(header))
    for r in runs:
        at = "".join(f"{_fmt(r.score_at(s)):>8}" for s in CONTROL_AT)
        print(f"{'control':<8} {r.seed:>4}{at} {r.best_score:>8.1f} {r.train_seconds:>8.1f} {r.eval_seconds:>7.1f}")
    for r in real or []:  # the real run at the same points (it may have stopped earlier, at the target)
        at = "".join(f"{_fmt(r.score_at(s)):>8}" for s in CONTROL_AT)
        print(f"{'real run':<8} {r.seed:>4}{at}")
    print("-" * len(header))
    print(
        "  (@Nk = the first evaluation at or after N env steps; evaluations every 5k, at 512-step update bounds;\n"
        "   '-' for a real run = it had already stopped at eval return >= 475)"
    )
    if verbose:
        for r in runs:
            print(f"  curve control seed {r.seed}: {_curve(r)}")


# ----------------------------------------------------------------------------------------------------------------
# Throughput: smc_search (SPO.acting_policy) vs raw BatchedEnv.step at the same batch size
# ----------------------------------------------------------------------------------------------------------------
def search_rate(module: SPO, num_envs: int, searches: int) -> float:
    """Searches/s of ``module.acting_policy(env, training=True)`` from a fixed batch of CartPole states."""
    env = BatchedEnv(CartPole(), num_envs, "cpu", seed=0)
    obs = env.reset()
    policy = module.acting_policy(env, deterministic=False, training=True)
    generator = torch.Generator().manual_seed(2)
    for _ in range(5):  # warm-up
        policy(obs, generator)
    start = time.perf_counter()
    for _ in range(searches):
        policy(obs, generator)
    seconds = time.perf_counter() - start
    env.close()
    return searches / seconds


@torch.no_grad()
def nets_rate(module: SPO, batch: int, steps: int) -> float:
    """Particle-steps/s of the networks alone in one search step (V of the next states, π params, a draw)."""
    env = BatchedEnv(CartPole(), batch, "cpu", seed=0)
    obs = env.reset()
    prior = module.prior
    generator = torch.Generator().manual_seed(3)

    def one() -> None:
        prior.value(obs[keys.OBS])
        prior.sample(prior.params(obs), generator)

    for _ in range(5):
        one()
    start = time.perf_counter()
    for _ in range(steps):
        one()
    seconds = time.perf_counter() - start
    env.close()
    return steps * batch / seconds


#: Search variants measured beside the default float32 eager search (same weights).
VARIANTS = {
    "bfloat16": {"search_precision": "bfloat16"},
    "compiled": {"compile_search": True},
    "bf16+comp": {"search_precision": "bfloat16", "compile_search": True},
}


def run_throughput(quick: bool) -> list[dict[str, float]]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    # (256, 256) ReLU actor/critic, N = 16, depth 4, like configs/spo.yaml; the same weights in both precisions
    module = SPO(env_spec=CartPole().spec)
    module.eval()
    variants = {"float32": module}
    for name, kwargs in VARIANTS.items():
        variants[name] = SPO(env_spec=CartPole().spec, **kwargs)
        variants[name].load_state_dict(module.state_dict())
        variants[name].eval()
    n, depth = module.search_config.num_particles, module.search_config.depth
    budget = 150_000 if quick else 600_000  # particle-steps (and raw env steps) per measurement
    repeats = 2 if quick else 3
    rows = []
    for num_envs in (16, 64):
        batch = num_envs * n
        searches = max(10, budget // (batch * depth))
        steps = max(10, budget // batch)
        rates: dict[str, list[float]] = {name: [] for name in variants}
        nets, raw = [], []
        for _ in range(repeats):  # interleaved, best of `repeats`: the machine may be shared, noise only slows
            for name, variant in variants.items():
                rates[name].append(search_rate(variant, num_envs, searches))
            nets.append(nets_rate(module, batch, steps))
            raw.append(raw_env_rate(batch, steps))
        for name, rate in rates.items():
            rows.append({
                "num_envs": num_envs,
                "particles": n,
                "depth": depth,
                "precision": name,
                "searches": max(rate),
                "nets": max(nets),
                "raw": max(raw),
            })  # fmt: skip
    return rows


def print_throughput(rows: list[dict[str, float]]) -> None:
    print(
        "\n== Search throughput on CartPole (1 thread): smc_search via SPO.acting_policy(training=True) vs raw "
        "BatchedEnv.step at batch E·N =="
    )
    header = (
        f"{'E':>4} {'N':>3} {'depth':>5} {'E·N':>5} {'search':>9} {'ms/search':>10} {'real steps/s':>12} "
        f"{'particle-st/s':>14} {'nets-only/s':>12} {'raw env/s':>12} {'search/raw':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        batch = r["num_envs"] * r["particles"]
        particle_rate = r["searches"] * batch * r["depth"]
        print(
            f"{r['num_envs']:>4} {r['particles']:>3} {r['depth']:>5} {batch:>5} {r['precision']:>9} "
            f"{1e3 / r['searches']:>10.2f} "
            f"{r['searches'] * r['num_envs']:>12,.0f} {particle_rate:>14,.0f} {r['nets']:>12,.0f} {r['raw']:>12,.0f} "
            f"{particle_rate / r['raw']:>10.3f}"
        )
    print(
        "  (best of interleaved repeats; particle-st/s = E·N·depth·searches/s; real steps/s = E·searches/s, the\n"
        "   acting rate of search alone; nets-only/s = rows/s of critic + actor + a draw on E·N rows, the network\n"
        "   part of one search step (float32); raw env/s = BatchedEnv(CartPole(), E·N).step with random actions;\n"
        "   search: float32 eager (default), bfloat16 = search_precision: bfloat16, compiled = compile_search: true,\n"
        "   the same weights; the compiled variants' first searches (their compile) are in the warm-up)"
    )


# ----------------------------------------------------------------------------------------------------------------
# Scaling: search cost against particles and depth
# ----------------------------------------------------------------------------------------------------------------
SCALING_ENVS = 16
SCALING = [(n, 4) for n in (8, 16, 32, 64, 128, 256)] + [(16, d) for d in (1, 2, 8)]


def run_scaling(quick: bool) -> None:
    """ms per search and particle-steps/s at ``SCALING_ENVS`` envs for N = 8..256 (depth 4) and depth 1..8 (N = 16),
    float32 and bfloat16 (eager), each the best of two interleaved measurements."""
    torch.set_num_threads(1)
    budget = 0.5 if quick else 1.5  # seconds per measurement
    print(f"\n== Search scaling on CartPole, E = {SCALING_ENVS} envs, (256, 256) networks, 1 thread ==")
    print(f"{'N':>4} {'depth':>5} {'E·N':>5} {'ms float32':>11} {'ms bfloat16':>12} {'particle-st/s f32':>18} "
          f"{'particle-st/s bf16':>19} {'µs per E·N·depth f32':>21}")  # fmt: skip
    for n, depth in SCALING:
        ms = {}
        for precision in ("float32", "bfloat16"):
            torch.manual_seed(0)
            module = SPO(env_spec=CartPole().spec, num_particles=n, search_depth=depth, resample_period=max(depth, 1),
                         search_precision=precision)  # fmt: skip
            module.eval()
            probe = 1.0 / search_rate(module, SCALING_ENVS, 3)
            searches = max(3, int(budget / probe))
            ms[precision] = min(1e3 / search_rate(module, SCALING_ENVS, searches) for _ in range(2))
        work = SCALING_ENVS * n * depth
        print(f"{n:>4} {depth:>5} {SCALING_ENVS * n:>5} {ms['float32']:>11.2f} {ms['bfloat16']:>12.2f} "
              f"{work / ms['float32'] * 1e3:>18,.0f} {work / ms['bfloat16'] * 1e3:>19,.0f} "
              f"{ms['float32'] * 1e3 / work:>21.3f}")  # fmt: skip
    print("  (resample_period = depth: one resample, at the end, as configs/spo.yaml does at depth 4)")


# ----------------------------------------------------------------------------------------------------------------
# Summary
# ----------------------------------------------------------------------------------------------------------------
def _control_margin_row(
    real: list[RunResult], control: list[RunResult], verdict: Callable[[bool], str]
) -> tuple[str, str, str, str]:
    """Paired by seed: the real run's eval return at 10k minus its control's; every seed must clear the margin."""
    by_seed = {r.seed: r for r in real}
    margins: list[float | None] = []
    for c in control:
        real_score = cartpole_at_check(by_seed[c.seed]) if c.seed in by_seed else None
        control_score = c.score_at(CARTPOLE_CHECK_STEPS)
        margins.append(None if real_score is None or control_score is None else real_score - control_score)
    ok = bool(margins) and all(m is not None and m >= CONTROL_MARGIN for m in margins)
    return (
        f"Real run minus control (η=1e9), eval return @{CARTPOLE_CHECK_STEPS // 1000}k",
        ", ".join(_fmt(m) for m in margins),
        f"every seed >= {CONTROL_MARGIN:g}",
        verdict(ok),
    )


def summarise(
    learning: dict[str, list[RunResult]],
    control: list[RunResult] | None,
    throughput: list[dict[str, float]] | None,
) -> bool | None:
    """Print the summary table; returns the overall verdict (None when no PASS criterion was run)."""
    rows: list[tuple[str, str, str, str]] = []  # check, measured, criterion, verdict
    verdicts: list[bool] = []

    def verdict(ok: bool, counts: bool = True) -> str:
        if counts:
            verdicts.append(ok)
            return "PASS" if ok else "FAIL"
        return "(pass)" if ok else "(fail)"

    if "cartpole" in learning:
        runs = learning["cartpole"]
        med = median_or_inf([r.env_steps for r in runs])
        per_seed = ", ".join(str(r.env_steps) if r.crossed else f">{r.total_env_steps}" for r in runs)
        med_txt = f"{med:.0f}" if med != float("inf") else "never"
        rows.append((
            "CartPole env steps to eval 475",
            f"median {med_txt} ({per_seed})",
            f"median <= {CARTPOLE_MAX_MEDIAN_STEPS}",
            verdict(med <= CARTPOLE_MAX_MEDIAN_STEPS),
        ))  # fmt: skip
        trains = [r.train_seconds for r in runs if r.crossed]
        rows.append((
            "CartPole train s to 475 (fit - eval)",
            f"median {_fmt(statistics.median(trains) if trains else None)} "
            f"({', '.join(f'{r.train_seconds:.0f}' for r in runs)})",
            "-",
            "info",
        ))  # fmt: skip
        at10k = [cartpole_at_check(r) for r in runs]
        ok = all(v is not None and v >= CARTPOLE_CHECK_MIN for v in at10k)
        rows.append((
            "CartPole eval return @10k, check (i)",
            ", ".join(_fmt(v) for v in at10k),
            f"every seed >= {CARTPOLE_CHECK_MIN:g}",
            verdict(ok, counts=False),
        ))  # fmt: skip
    if control is not None:
        rows.append(_control_margin_row(learning.get("cartpole", []), control, verdict))
        at30k = [r.score_at(CONTROL_AT[-1]) for r in control]
        ok = all(v is not None and v <= CONTROL_MAX_RETURN for v in at30k)
        rows.append((
            "Control (η=1e9) eval return @30k",
            ", ".join(_fmt(v) for v in at30k),
            f"every seed <= {CONTROL_MAX_RETURN:g}",
            verdict(ok),
        ))  # fmt: skip
    if "tictactoe" in learning:
        runs = learning["tictactoe"]
        per_seed = ", ".join(f"{r.env_steps}" if r.crossed else f"best {r.best_score:.3f}" for r in runs)
        n_crossed = sum(r.crossed for r in runs)
        rows.append((
            "TicTacToe env steps to win-or-draw 0.98",
            f"{n_crossed}/{len(runs)} seeds ({per_seed})",
            "every seed >= 0.98",
            verdict(n_crossed == len(runs)),
        ))  # fmt: skip
    if "pendulum" in learning:
        runs = learning["pendulum"]
        rows.append((
            "Pendulum eval return, final / best",
            ", ".join(f"{r.final_score:.0f} / {r.best_score:.0f}" for r in runs),
            "no target",
            "info",
        ))  # fmt: skip
    for r in throughput or []:
        batch = r["num_envs"] * r["particles"]
        rate = r["searches"] * batch * r["depth"]
        rows.append((
            f"Search E={r['num_envs']} N={r['particles']} d={r['depth']} {r['precision']}: particle-st/s",
            f"{rate:,.0f} = {rate / r['raw']:.3f} × raw env at {batch}",
            "-",
            "info",
        ))  # fmt: skip
    return print_summary(rows, verdicts, "criterion")


# ----------------------------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 seed (unless --seeds), shorter throughput")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 per env (default 3; 1 with --quick)")
    parser.add_argument("--seed-offset", type=int, default=0, help="first seed")
    parser.add_argument("--envs", default="cartpole,tictactoe,pendulum", help="comma list of " + ",".join(TASKS))
    parser.add_argument(
        "--sections", default="learning,control,throughput", help="comma list of learning,control,throughput,scaling"
    )
    parser.add_argument("--verbose", action="store_true", help="print every evaluation of every run")
    parser.add_argument(
        "--profile", action="store_true", help="only print where one search's and a short fit's time goes"
    )
    parser.add_argument("--profile-config", default="spo.yaml", help="bundled config of the profiled fit")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra CLI setting for every learning and control run (tuning), e.g. "
        "--override model.init_args.num_particles=32",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = args.seeds if args.seeds is not None else (1 if args.quick else 3)
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    unknown_sections = sections - {"learning", "control", "throughput", "scaling"}
    if unknown_sections:
        parser.error(f"--sections: unknown {sorted(unknown_sections)}; choose from learning,control,throughput,scaling")
    envs = [e.strip().lower() for e in args.envs.split(",") if e.strip()]
    unknown = [e for e in envs if e not in TASKS]
    if unknown:
        parser.error(f"--envs: unknown {unknown}; choose from {list(TASKS)}")
    if "control" in sections and not ("learning" in sections and "cartpole" in envs):
        parser.error("--sections control compares with the CartPole learning runs: add learning and cartpole")
    overrides = overrides_to_args(args.override)
    if args.profile:
        profile(overrides, args.profile_config)
        return
    seed_list = list(range(args.seed_offset, args.seed_offset + seeds))
    print(
        f"rl_lightning SPO benchmark: torch {torch.__version__}, lightning {pl.__version__}, "
        f"threads {torch.get_num_threads()}, cpus {os.cpu_count()}, seeds {seeds}"
    )
    if args.override:
        print(f"  overrides: {' '.join(args.override)}")

    learning: dict[str, list[RunResult]] = {}
    if "learning" in sections:
        for key in envs:
            learning[key] = []
            for seed in seed_list:
                r = run_task(TASKS[key], seed, overrides)
                learning[key].append(r)
                fmt = _score_format(TASKS[key])
                print(
                    f"  [{TASKS[key].name} seed {seed}] crossed={r.crossed} env_steps={r.env_steps} "
                    f"total={r.total_env_steps} train={r.train_seconds:.1f}s eval={r.eval_seconds:.1f}s "
                    f"best={r.best_score:{fmt}} last={r.final_score:{fmt}}",
                    flush=True,
                )
    control: list[RunResult] | None = None
    if "control" in sections and "cartpole" in envs:
        control = []
        for seed in seed_list:
            r = run_task(CONTROL, seed, overrides)
            control.append(r)
            at = " ".join(f"@{s // 1000}k={_fmt(r.score_at(s))}" for s in CONTROL_AT)
            print(
                f"  [CartPole control seed {seed}] {at} max={r.best_score:.1f} train={r.train_seconds:.1f}s",
                flush=True,
            )
    throughput = run_throughput(args.quick) if "throughput" in sections else None
    if "scaling" in sections:
        run_scaling(args.quick)

    if learning:
        print_learning(learning, args.verbose)
        if "pendulum" in learning:
            print(f"  (Pendulum has no target; for comparison, {PPO_PENDULUM_NOTE})")
    if control is not None:
        print_control(control, learning.get("cartpole"), args.verbose)
    if throughput is not None:
        print_throughput(throughput)
    overall = summarise(learning, control, throughput)
    if overall is not None:
        print(f"\nOVERALL: {'PASS' if overall else 'FAIL'}")


if __name__ == "__main__":
    main()
