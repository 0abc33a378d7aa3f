"""Recurrent PPO (LSTM) vs feed-forward PPO on the velocity-masked CartPole (rl-zoo's ``CartPoleNoVel-v1``).

    python benchmarks/recurrent.py                       # seeds 0 1, budget 100k env steps each
    python benchmarks/recurrent.py --seeds 3 --steps 100000

The torch-native CartPole observing ``[x, theta]`` only (``CartPole(observe="position")``): without the velocities a
feed-forward policy cannot tell which way the pole is moving, so it needs memory. Each run is an in-process
``rl-lightning fit`` of a bundled config, seeds interleaved (recurrent, feed-forward, recurrent, ...):

* recurrent: ``configs/ppo_lstm_cartpole_novel.yaml`` as shipped (rl-zoo's ``ppo_lstm`` settings for CartPoleNoVel-v1);
* feed-forward: ``configs/ppo.yaml`` (rl-zoo's ``ppo`` CartPole-v1 settings) with the env switched to
  ``observe: position`` and the same budget.

An evaluation of ``--eval-episodes`` deterministic episodes runs every ``--eval-every`` env steps and stops the run at
the first mean return >= 475 (CartPole-v1's ``reward_threshold``, the zoo's threshold). Reported per run: env steps
to solve (or the best score within the budget), training wall time to the crossing (evaluation time excluded).
"""

from __future__ import annotations

import argparse

from _common import RunResult, TargetEvaluation, fit_with, median_or_inf, print_summary

# isort: split
from rl_lightning.envs import CartPole

TARGET = 475.0
_MASKED = '{"class_path": "rl_lightning.envs.CartPole", "init_args": {"observe": "position"}}'
MASKED_ENV = ["--data.init_args.env", _MASKED]
RUNS = {
    "recurrent (LSTM)": ("ppo_lstm_cartpole_novel.yaml", []),
    "feed-forward": ("ppo.yaml", MASKED_ENV),
}


def run(name: str, seed: int, steps: int, eval_every: int, episodes: int) -> RunResult:
    config, extra = RUNS[name]
    evaluation = TargetEvaluation(
        "return", TARGET, every_n_env_steps=eval_every, num_episodes=episodes, env=CartPole(observe="position")
    )
    result = fit_with(config, seed, evaluation, [*extra, "--data.init_args.total_env_steps", str(steps)])
    solved = f"solved at {result.env_steps} env steps" if result.crossed else f"not solved (best {result.best_score})"
    curve = " ".join(f"{int(h['env_steps'])}:{h['score']:.0f}" for h in result.history)
    print(f"{name:17s} seed {seed}: {solved}, train {result.train_seconds:.0f} s; curve {curve}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--eval-every", type=int, default=5_120)
    parser.add_argument("--eval-episodes", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, list[RunResult]] = {name: [] for name in RUNS}
    for seed in range(args.seeds):  # interleaved: both variants see the same machine load
        for name in RUNS:
            results[name].append(run(name, seed, args.steps, args.eval_every, args.eval_episodes))
    rows, verdicts = [], []
    for name, runs in results.items():
        solved = sum(r.crossed for r in runs)
        steps = median_or_inf([r.env_steps for r in runs])
        seconds = median_or_inf([r.train_seconds if r.crossed else None for r in runs])
        measured = f"{solved}/{len(runs)} solved; median {steps:.0f} env steps, {seconds:.0f} s to solve"
        recurrent = name.startswith("recurrent")
        criterion = f"eval return >= {TARGET:.0f}" if recurrent else "contrast"
        verdict = ("PASS" if solved == len(runs) else "FAIL") if recurrent else "info"
        rows.append((f"{name} on CartPole [x, theta]", measured, criterion, verdict))
        if recurrent:
            verdicts.append(solved == len(runs))
    print_summary(rows, verdicts)


if __name__ == "__main__":
    main()
