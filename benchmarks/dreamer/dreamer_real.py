"""DreamerV3 on real envs through the Gymnasium backends (issue 20: no snapshots, every backend).

    python benchmarks/dreamer/dreamer_real.py                                  # prefill,wm_loss: dreamer_atari.yaml
    python benchmarks/dreamer/dreamer_real.py --sections prefill               # seconds
    python benchmarks/dreamer/dreamer_real.py --sections pendulum --pendulum-steps 8000 --seeds 0

Run single-threaded (``torch.set_num_threads(1)``, set here). Sections:

  prefill   ``configs/dreamer_atari.yaml`` as shipped (AleVectorEnv, its preset, one env): its datamodule, set up
            alone, runs its whole uniform-random prefill (``learning_starts`` env steps) through its actor windows
            (sequence collector, replay writes, commits). Reports env steps/s per wall second and per CPU second of
            this process (all threads: on a machine shared with other jobs the wall rate shows their load), beside
            the raw rate of the same env stepped directly (``BatchedEnv.step``, random actions) as a ratio; target
            >= 500 env steps/s. Then the replay rows against the frames the env produced: the ring's actions are
            replayed on a fresh ale-py ``AtariVectorEnv`` (next-step autoreset, the preset's options, the run's
            seed) and every stored row (frames, reward, episode end) must equal what that env returns.
  wm_loss   the config's fit cut to its prefill plus one actor window of ``--atari-grad-steps`` ticks (size S,
            batch 16 x 64, ratio 1: that many gradient steps in one update); the world-model loss (rec + rew + con
            + scaled dyn and rep) of each; PASS if the mean of the last three is below that of the first three.
  pendulum  Gymnasium ``Pendulum-v1`` through ``GymnasiumVectorEnv`` (sync) against the torch-native ``Pendulum``,
            both under ``configs/dreamer_pendulum.yaml`` otherwise unchanged, ``--pendulum-steps`` env steps each,
            seeds interleaved; a deterministic evaluation (``--eval-episodes`` episodes) every ``--eval-every`` env
            steps. Reports both curves and the final returns (information: same env steps, same settings).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))  # benchmarks/shared: _common.py & co.
from _common import TargetEvaluation, build_cli, fit_with, print_summary  # first: quiet warnings and logs

# isort: split
import numpy as np
import torch

from rl_lightning.algos.dreamer.module import LOSS_SCALES
from rl_lightning.envs import AleVectorEnv, BatchedEnv
from rl_lightning.envs.gymnasium.backend import draw_seeds
from rl_lightning.envs.random_action import random_action

WM_TERMS = ("rec", "rew", "con", "dyn", "rep")


def raw_rate(env: AleVectorEnv, num: int, steps: int, seed: int = 0) -> tuple[float, float]:
    """(wall, CPU) env steps/s of ``env``'s training form stepped directly (``BatchedEnv.step``, random actions):
    the backend's own rate. CPU = this process's CPU time, all threads (what a machine shared with others hides)."""
    twin = env.fresh()
    twin.atari = env.atari  # ``fresh`` gives the evaluation form; measure the training one the collector steps
    batched = BatchedEnv(twin, num, seed=seed)
    view, gen = batched.reset(), torch.Generator().manual_seed(seed)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        batched.step(random_action(batched.spec, view, gen))
    rates = steps * num / (time.perf_counter() - wall), steps * num / (time.process_time() - cpu)
    batched.close()
    return rates


class _Acting:
    """What the datamodule's actor window asks of the module during prefill (the policy is uniform random)."""

    @staticmethod
    def actor_policy_version() -> int:
        return 0


def prefill(seed: int) -> tuple[Any, float, float]:
    """The config's datamodule, set up alone, through its whole random prefill (``learning_starts`` env steps):
    (datamodule, wall env steps/s, CPU env steps/s) over its actor windows (collector + ring writes + commits)."""
    dm = build_cli("dreamer_atari.yaml", seed).datamodule
    torch.set_num_threads(1)  # the config's 2 learner threads add OpenMP spin-waits to the CPU time, not to the work
    dm.setup("fit")  # no trainer: rank 0, one process, no module checks
    wall = cpu = 0.0
    while dm.env_steps < dm.learning_starts:
        w, c = time.perf_counter(), time.process_time()
        dm._actor_window(_Acting())
        wall, cpu = wall + time.perf_counter() - w, cpu + time.process_time() - c
    return dm, dm.env_steps / wall, dm.env_steps / cpu


class LossRecorder:
    """Records the world-model loss (rec + rew + con + scaled dyn and rep) of each of the module's gradient steps."""

    def __init__(self, module: Any) -> None:
        self.losses: list[float] = []
        step = module._gradient_step

        def recorded_step(seq: Any, optimizer: Any) -> Any:
            terms = step(seq, optimizer)
            hp = module.hparams
            self.losses.append(sum(float(terms[f"loss_{k}"]) * hp[LOSS_SCALES[k]] for k in WM_TERMS))
            print(f"gradient step {len(self.losses)}: world-model loss {self.losses[-1]:.1f}", flush=True)
            return terms

        module._gradient_step = recorded_step


def replay_rows_match(datamodule: Any, seed: int) -> tuple[int, int]:
    """Replay the ring's actions on a fresh ale-py vector env (same options and seed): (rows matching, rows)."""
    from ale_py.vector_env import AtariVectorEnv

    from rl_lightning.envs.gymnasium.atari import snake_case

    env, ring = datamodule.env, datamodule.replay
    rows = ring._storage[: ring.size, 0]  # one env; the ring is not full, so storage rows are in time order
    seeds = draw_seeds(1, torch.Generator().manual_seed(seed))
    venv = AtariVectorEnv(snake_case(env.game), 1, autoreset_mode="NextStep", **env.atari.ale_vector_kwargs())
    obs, _ = venv.reset(seed=np.asarray(seeds, dtype=np.int64))
    frames, rewards, ends = [obs], [0.0], [False]
    for action in rows["action"][:-1].tolist():
        obs, reward, terminated, truncated, _ = venv.step(np.asarray([action]))
        frames.append(obs)
        rewards.append(float(np.sign(reward[0])) if env.atari.clips else float(reward[0]))
        ends.append(bool(terminated[0] or truncated[0]))
    venv.close()
    stack = torch.as_tensor(np.concatenate(frames))  # [rows, stack, H, W, C] (RGB) or [rows, stack, H, W]
    if stack.dim() == 5:
        stack = stack.permute(0, 1, 4, 2, 3).reshape(len(stack), -1, *stack.shape[2:4])
    same = (rows["obs"] == stack).flatten(1).all(1)
    same &= rows["reward"] == torch.tensor(rewards)
    same &= (rows["terminated"] | rows["truncated"]) == torch.tensor(ends)
    return int(same.sum()), len(same)


def run_prefill(seed: int, raw_steps: int) -> list[tuple[str, str, str, str]]:
    dm, wall, cpu = prefill(seed)
    raw_wall, raw_cpu = raw_rate(dm.env, dm.num_envs, raw_steps, seed)
    matching, rows = replay_rows_match(dm, dm.seed if dm.seed is not None else seed)
    dm.teardown("fit")
    print(f"\nprefill ({dm.env_steps} env steps): {wall:,.0f} env steps/s wall, {cpu:,.0f} per CPU second; raw "
          f"AleVectorEnv {raw_wall:,.0f} wall, {raw_cpu:,.0f} per CPU second")  # fmt: skip
    print(f"replay rows matching the frames ale-py produced: {matching} / {rows}")
    return [
        ("prefill env steps/s per CPU second", f"{cpu:,.0f}", ">= 500", "PASS" if cpu >= 500 else "MISS"),
        ("prefill env steps/s wall (shared machine)", f"{wall:,.0f}", "info", "info"),
        ("prefill / raw AleVectorEnv (CPU time)", f"{cpu / raw_cpu:.2f}", "info", "info"),
        ("replay rows = env frames", f"{matching}/{rows}", "all", "PASS" if matching == rows else "FAIL"),
    ]


def run_wm_loss(seed: int, grad_steps: int) -> list[tuple[str, str, str, str]]:
    """The config's fit cut to its prefill plus one actor window of ``grad_steps`` ticks (ratio 1: that many
    gradient steps); the world-model loss of each."""
    cli = build_cli("dreamer_atari.yaml", seed, ["--data.init_args.rollout_length", str(grad_steps)])
    dm, module = cli.datamodule, cli.model
    dm.total_env_steps = dm.learning_starts + grad_steps * dm.num_envs
    dm.commit_stride = min(dm.commit_stride, grad_steps)
    recorder = LossRecorder(module)
    cli.trainer.fit(module, dm)
    losses = recorder.losses[:grad_steps]
    print("\nworld-model loss per gradient step: " + ", ".join(f"{v:.1f}" for v in losses))
    falling = len(losses) >= 6 and statistics.mean(losses[-3:]) < statistics.mean(losses[:3])
    return [
        (f"world-model loss, first {len(losses)} steps", f"{losses[0]:.0f} -> {losses[-1]:.0f}", "falling",
         "PASS" if falling else "FAIL"),
    ]  # fmt: skip


PENDULUM_ENVS = {
    "torch Pendulum": ["--data.init_args.env", "rl_lightning.envs.Pendulum"],
    "GymnasiumVectorEnv Pendulum-v1": [
        "--data.init_args.env", "rl_lightning.envs.GymnasiumVectorEnv",
        "--data.init_args.env.init_args.env_id", "Pendulum-v1",
    ],
}  # fmt: skip


def run_pendulum(
    seeds: list[int], steps: int, every: int, episodes: int, envs: list[str]
) -> list[tuple[str, str, str, str]]:
    finals: dict[str, list[float]] = {name: [] for name in envs}
    for seed in seeds:
        for name in envs:  # interleaved: both envs under the same machine load
            args = PENDULUM_ENVS[name]
            callback = TargetEvaluation("return", None, every_n_env_steps=every, num_episodes=episodes)
            extra = [*args, "--data.init_args.total_env_steps", str(steps)]
            result = fit_with("dreamer_pendulum.yaml", seed, callback, extra)
            curve = ", ".join(f"{h['env_steps']:.0f}:{h['score']:.0f}" for h in result.history)
            print(f"{name} seed {seed} ({result.fit_seconds:.0f} s): {curve}")
            finals[name].append(result.final_score)
    return [(f"{name} final return", f"{statistics.mean(v):.0f}", "info", "info") for name, v in finals.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="prefill,wm_loss", help="comma list of prefill,wm_loss,pendulum")
    parser.add_argument("--seeds", default="0", help="comma list of seeds")
    parser.add_argument("--atari-grad-steps", type=int, default=10)
    parser.add_argument("--raw-steps", type=int, default=2000, help="steps of the raw AleVectorEnv rate")
    parser.add_argument("--pendulum-steps", type=int, default=8000)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument(
        "--pendulum-envs", default=",".join(PENDULUM_ENVS), help=f"comma list of {', '.join(PENDULUM_ENVS)} (one "
        "per process runs them side by side)",
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    sections = set(args.sections.split(","))
    if "prefill" in sections:
        rows += run_prefill(seeds[0], args.raw_steps)
    if "wm_loss" in sections:
        rows += run_wm_loss(seeds[0], args.atari_grad_steps)
    if "pendulum" in sections:
        envs = args.pendulum_envs.split(",")
        rows += run_pendulum(seeds, args.pendulum_steps, args.eval_every, args.eval_episodes, envs)
    overall = print_summary(rows, [row[3] == "PASS" for row in rows if row[3] in ("PASS", "FAIL")])
    if overall is not None:
        print(f"OVERALL: {'PASS' if overall else 'FAIL'}")


if __name__ == "__main__":
    main()
