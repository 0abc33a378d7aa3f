"""Recurrent PPO (LSTM) against feed-forward PPO and sb3-contrib's RecurrentPPO on two tasks that need memory.

    python benchmarks/recurrent/recurrent.py                                    # CartPole [x, theta], seeds 0 1
    python benchmarks/recurrent/recurrent.py --seeds 3 --peer-python /tmp/sb3c_venv/bin/python
    python benchmarks/recurrent/recurrent.py --task repeat_first --seeds 2 --peer-python V/bin/python

``--task cartpole``: the torch-native CartPole observing ``[x, theta]`` only (``CartPole(observe="position")``,
rl-zoo's ``CartPoleNoVel-v1``): without the velocities a feed-forward policy cannot tell which way the pole moves.
Recurrent: ``configs/ppo_lstm_cartpole_novel.yaml`` as shipped (rl-zoo's ``ppo_lstm`` settings); feed-forward:
``configs/ppo.yaml`` (rl-zoo's ``ppo`` CartPole-v1 settings) with the env switched to ``observe: position``. Solved
at a mean return >= 475 (CartPole-v1's ``reward_threshold``).

``--task repeat_first``: POPGym's RepeatFirstEasy (needs the ``memory`` extra): name the suit of the episode's first
card at each of its 51 steps (+-1/51 a step). Recurrent: ``configs/ppo_lstm_repeat_first.yaml``; feed-forward:
``configs/ppo.yaml`` with that env and SB3 PPO's defaults (below), which can only guess (about -0.5). Solved at a mean
return >= 0.9 (about 97.5% of the steps right).

Each run is an in-process ``rl-lightning fit`` of the bundled config; with ``--peer-python`` (a venv holding
``torch==2.13.0``, ``sb3-contrib`` and ``gymnasium``, plus ``popgym`` for ``repeat_first``) sb3-contrib's
RecurrentPPO runs ``benchmarks/peers/sb3_recurrent_ppo.py --task T`` with the same settings, budget and evaluation
protocol. Seeds are interleaved (recurrent, peer, feed-forward, recurrent, ...) so a shared machine's load hits all
alike. ``--eval-episodes`` deterministic episodes every ``--eval-every`` env steps (checked after each update); a
run stops at the first mean return >= the target. Training seconds exclude evaluation on both sides.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))  # benchmarks/shared: _common.py & co.
from _common import RunResult, TargetEvaluation, fit_with, median_or_inf, overrides_to_args, print_summary

# isort: split
from rl_lightning.envs import CartPole

PEER_SCRIPT = Path(__file__).resolve().parents[1] / "peers" / "sb3_recurrent_ppo.py"
WALL_TARGET = 0.5  # issue 22: ours' training wall time to solve <= 0.5x sb3-contrib's
_MASKED = '{"class_path": "rl_lightning.envs.CartPole", "init_args": {"observe": "position"}}'
_REPEAT_FIRST = (
    '{"class_path": "rl_lightning.envs.GymnasiumEnv", "init_args": {"env_id": "popgym:popgym-RepeatFirstEasy-v0"}}'
)
# SB3 PPO's defaults (the recurrent config's are sb3-contrib RecurrentPPO's): batch_size 64 = 16 minibatches of 1,024.
_REPEAT_FIRST_FEED_FORWARD = {
    "data.init_args.env": _REPEAT_FIRST, "data.init_args.num_envs": "8", "data.init_args.num_steps": "128",
    "model.init_args.num_minibatches": "16", "model.init_args.update_epochs": "10", "model.init_args.lr": "0.0003",
    "model.init_args.anneal_lr": "false", "model.init_args.gamma": "0.99", "model.init_args.gae_lambda": "0.95",
    "model.init_args.ent_coef": "0.0",
}  # fmt: skip


@dataclass(frozen=True)
class Task:
    """One memory task: its bundled configs (name -> config and CLI overrides), target and default protocol."""

    title: str
    runs: dict[str, tuple[str, list[str]]]
    target: float
    steps: int
    eval_every: int
    eval_env: Callable[[], Any] | None  # None: a copy of the training env


TASKS = {
    "cartpole": Task(
        "CartPole [x, theta]",
        {"recurrent (LSTM)": ("ppo_lstm_cartpole_novel.yaml", []),
         "feed-forward": ("ppo.yaml", ["--data.init_args.env", _MASKED])},  # fmt: skip
        475.0, 100_000, 5_120, lambda: CartPole(observe="position"),
    ),
    "repeat_first": Task(
        "POPGym RepeatFirstEasy",
        {"recurrent (LSTM)": ("ppo_lstm_repeat_first.yaml", []),
         "feed-forward": ("ppo.yaml", [part for k, v in _REPEAT_FIRST_FEED_FORWARD.items() for part in (f"--{k}", v)])},
        0.9, 500_000, 10_240, None,
    ),
}  # fmt: skip
PEER = "sb3-contrib RecurrentPPO"


def run_ours(task: Task, name: str, seed: int, args: argparse.Namespace) -> RunResult:
    config, extra = task.runs[name]
    env = task.eval_env() if task.eval_env is not None else None
    evaluation = TargetEvaluation(
        "return", task.target, every_n_env_steps=args.eval_every, num_episodes=args.eval_episodes, env=env
    )
    extra = [*extra, "--data.init_args.total_env_steps", str(args.steps)]
    if name.startswith("recurrent"):
        extra += overrides_to_args(args.override)
    result = fit_with(config, seed, evaluation, extra)
    solved = f"solved at {result.env_steps} env steps" if result.crossed else f"not solved (best {result.best_score})"
    curve = " ".join(f"{int(h['env_steps'])}:{h['score']:.2f}" for h in result.history)
    print(f"{name:17s} seed {seed}: {solved}, train {result.train_seconds:.1f} s; curve {curve}", flush=True)
    return result


def run_peer(task_name: str, seed: int, args: argparse.Namespace) -> RunResult:
    """The peer script in its own venv; its JSON line as a ``RunResult`` (train seconds to the crossing if any)."""
    cmd = [args.peer_python, str(PEER_SCRIPT), "--task", task_name, "--seed", str(seed), "--steps", str(args.steps),
           "--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes),
           "--target", str(TASKS[task_name].target)]  # fmt: skip
    peer = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)  # its stderr (eval scores) shows live
    out = json.loads(peer.stdout.strip().splitlines()[-1])
    crossed = out["solved_at"] is not None
    seconds = out["train_seconds_at_solve"] if crossed else out["train_seconds"]
    scores = [score for _, score in out["curve"]] or [float("nan")]
    history = [{"env_steps": float(steps), "score": score} for steps, score in out["curve"]]
    result = RunResult(seed, crossed, out["solved_at"], seconds, 0.0, seconds, scores[-1], max(scores),
                       out["env_steps"], history)  # fmt: skip
    solved = f"solved at {result.env_steps} env steps" if crossed else f"not solved (best {result.best_score})"
    curve = " ".join(f"{int(steps)}:{score:.2f}" for steps, score in out["curve"])
    print(f"{PEER} seed {seed}: {solved}, train {seconds:.1f} s; curve {curve}", flush=True)
    return result


def peer_verdicts(ours: list[RunResult], theirs: list[RunResult]) -> tuple[list[tuple[str, str, str, str]], bool]:
    """Rows comparing env steps and per-seed training-time ratios (side by side) against the targets."""
    ours_steps, their_steps = median_or_inf([r.env_steps for r in ours]), median_or_inf([r.env_steps for r in theirs])
    ratios = [mine.train_seconds / peer.train_seconds for mine, peer in zip(ours, theirs)]
    both = all(r.crossed for r in ours + theirs)
    ratio = statistics.median(ratios)
    steps_ok, wall_ok = ours_steps < float("inf") and ours_steps <= their_steps, both and ratio <= WALL_TARGET
    per_seed = ", ".join(f"{r:.2f}" for r in ratios)
    rows = [
        ("median env steps to solve, ours vs peer", f"{ours_steps:,.0f} vs {their_steps:,.0f}", "ours <= peer",
         "PASS" if steps_ok else "FAIL"),
        ("training seconds to solve, ours / peer per seed", f"{per_seed} (median {ratio:.2f})",
         f"<= {WALL_TARGET}" + ("" if both else " (a run did not solve: seconds are its whole budget)"),
         "PASS" if wall_ok else "FAIL"),
    ]  # fmt: skip
    return rows, steps_ok and wall_ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), default="cartpole")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds run are first-seed, first-seed + 1, ...")
    parser.add_argument("--steps", type=int, default=None, help="env-step budget per run (default: the task's)")
    parser.add_argument("--eval-every", type=int, default=None, help="env steps between evaluations (task default)")
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--peer-python", default=None, help="python of a venv with sb3-contrib (adds the peer runs)")
    parser.add_argument("--no-feed-forward", action="store_true", help="skip the feed-forward contrast runs")
    parser.add_argument(
        "--override", action="append", default=[], help="KEY=VALUE for our recurrent runs (repeatable), e.g. "
        "model.init_args.anneal_clip=false (an ablation)",
    )  # fmt: skip
    args = parser.parse_args()
    task = TASKS[args.task]
    args.steps = args.steps or task.steps
    args.eval_every = args.eval_every or task.eval_every
    names = [name for name in task.runs if not (args.no_feed_forward and name == "feed-forward")]
    results: dict[str, list[RunResult]] = {name: [] for name in names}
    if args.peer_python:
        results[PEER] = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):  # interleaved: all see the same machine load
        for name in results:
            run = run_peer(args.task, seed, args) if name == PEER else run_ours(task, name, seed, args)
            results[name].append(run)
    rows, verdicts = [], []
    for name, runs in results.items():
        solved = sum(r.crossed for r in runs)
        steps = median_or_inf([r.env_steps for r in runs])
        seconds = median_or_inf([r.train_seconds if r.crossed else None for r in runs])
        measured = f"{solved}/{len(runs)} solved; median {steps:,.0f} env steps, {seconds:.1f} s to solve"
        recurrent = name.startswith("recurrent")
        criterion = f"eval return >= {task.target:g}" if recurrent else "contrast"
        verdict = ("PASS" if solved == len(runs) else "FAIL") if recurrent else "info"
        rows.append((f"{name} on {task.title}", measured, criterion, verdict))
        if recurrent:
            verdicts.append(solved == len(runs))
    if args.peer_python:
        peer_rows, ok = peer_verdicts(results["recurrent (LSTM)"], results[PEER])
        rows += peer_rows
        verdicts.append(ok)
    print_summary(rows, verdicts)


if __name__ == "__main__":
    main()
