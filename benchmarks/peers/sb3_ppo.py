"""Stable-Baselines3 PPO on the workloads our PPO benchmarks measure, run in SB3's own virtual environment.

Not part of the package: the benchmarks call it as a subprocess with ``--peer-python`` (a venv holding
``torch==2.13.0``, ``stable-baselines3``, ``gymnasium[mujoco]``, ``ale-py``); it prints one JSON line.

    python sb3_ppo.py train --env halfcheetah --total-env-steps 100000 [--seed 0] [--eval-episodes 0]
    python sb3_ppo.py collect --env halfcheetah --num-envs 8 --steps 2000 --vec dummy|subproc
    python sb3_ppo.py collect --env breakout --num-envs 8 --steps 500 --vec subproc
    python sb3_ppo.py solve --env cartpole --seed 0 [--eval-every 1024 --eval-episodes 20 --target 475]
    python sb3_ppo.py solve --env halfcheetah --target 3000 --eval-every 10240 --eval-episodes 5 --total-env-steps 1e6

``train`` times ``model.learn`` (training only; the optional evaluation afterwards is timed apart), on ``--vec``'s
VecEnv; ``cpu_seconds`` is the process's own CPU time (user + system) over the same span.
Settings are rl-baselines3-zoo's (``hyperparams/ppo.yml``): HalfCheetah and Walker2d (``normalize: true`` →
``VecNormalize`` with the agent's γ), CartPole-v1, and Atari (``AtariWrapper``, 8 envs, ``CnnPolicy``).
``solve`` trains until the first evaluation (``--eval-episodes`` deterministic episodes on a separate env, every
``--eval-every`` env steps, checked after each update as ``benchmarks/classic/ppo.py``'s learning section does) reaches
``--target``, and reports the env steps there and the training seconds (evaluation time taken out).
``collect`` times ``PPO.collect_rollouts`` (policy forward, sampling, env step, rollout-buffer writes: SB3's own
collection loop) into a buffer of ``steps`` ticks, after a warm-up rollout, and the raw rate of the same VecEnv
stepped with random actions.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_atari_env, make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecFrameStack, VecNormalize


def linear(start: float):
    """rl-zoo's ``lin_<start>``: ``start`` decayed linearly to 0 over ``learn``'s ``total_timesteps``."""
    return lambda progress_remaining: progress_remaining * start


def zoo_settings(env: str) -> dict:
    """rl-baselines3-zoo hyperparams/ppo.yml entries (zoo commit 22e3ff2)."""
    if env == "halfcheetah":
        return {
            "n_envs": 1, "normalize": True, "policy": "MlpPolicy", "batch_size": 64, "n_steps": 512, "gamma": 0.98,
            "learning_rate": 2.0633e-05, "ent_coef": 0.000401762, "clip_range": 0.1, "n_epochs": 20,
            "gae_lambda": 0.92, "max_grad_norm": 0.8, "vf_coef": 0.58096,
            "policy_kwargs": {"log_std_init": -2, "ortho_init": False, "activation_fn": torch.nn.ReLU,
                              "net_arch": {"pi": [256, 256], "vf": [256, 256]}},
        }  # fmt: skip
    if env == "walker2d":
        return {
            "n_envs": 1, "normalize": True, "policy": "MlpPolicy", "batch_size": 32, "n_steps": 512, "gamma": 0.99,
            "learning_rate": 5.05041e-05, "ent_coef": 0.000585045, "clip_range": 0.1, "n_epochs": 20,
            "gae_lambda": 0.95, "max_grad_norm": 1, "vf_coef": 0.871923,
        }  # fmt: skip
    if env == "cartpole":
        return {
            "n_envs": 8, "normalize": False, "policy": "MlpPolicy", "n_steps": 32, "batch_size": 256,
            "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 20, "ent_coef": 0.0,
            "learning_rate": linear(0.001), "clip_range": linear(0.2),  # zoo's lin_0.001, lin_0.2 (over 1e5 steps)
        }  # fmt: skip
    if env == "breakout":
        return {
            "n_envs": 8, "normalize": False, "policy": "CnnPolicy", "n_steps": 128, "n_epochs": 4, "batch_size": 256,
            "learning_rate": 2.5e-4, "clip_range": 0.1, "vf_coef": 0.5, "ent_coef": 0.01,
        }  # fmt: skip
    raise SystemExit(f"--env {env!r}: choose halfcheetah, walker2d, cartpole or breakout")


ENV_IDS = {
    "halfcheetah": "HalfCheetah-v5", "walker2d": "Walker2d-v5", "cartpole": "CartPole-v1",
    "breakout": "BreakoutNoFrameskip-v4",
}  # fmt: skip


def _breakout(**kwargs) -> gym.Env:
    """The raw ALE env, made where it runs (subprocesses must import ale_py to see its ids)."""
    import ale_py

    gym.register_envs(ale_py)
    return gym.make(ENV_IDS["breakout"], **kwargs)


def make_env(env: str, num_envs: int, seed: int, vec: str):
    vec_cls = SubprocVecEnv if vec == "subproc" else DummyVecEnv
    if env == "breakout":
        return VecFrameStack(make_atari_env(_breakout, n_envs=num_envs, seed=seed, vec_env_cls=vec_cls), 4)
    return make_vec_env(ENV_IDS[env], n_envs=num_envs, seed=seed, vec_env_cls=vec_cls)


def build(env: str, num_envs: int | None, seed: int, vec: str) -> tuple[PPO, object]:
    settings = dict(zoo_settings(env))
    n_envs = num_envs or settings.pop("n_envs")
    settings.pop("n_envs", None)
    normalize = settings.pop("normalize")
    policy = settings.pop("policy")
    venv = make_env(env, n_envs, seed, vec)
    if normalize:
        venv = VecNormalize(venv, gamma=settings["gamma"])
    model = PPO(policy, venv, seed=seed, device="cpu", verbose=0, **settings)
    return model, venv


def evaluate(model: PPO, venv, env_id: str, episodes: int) -> float:
    """Mean raw return of ``episodes`` deterministic episodes (``Monitor``'s), the VecNormalize statistics frozen."""
    eval_env = make_vec_env(env_id, n_envs=1, seed=10_000)
    if isinstance(venv, VecNormalize):
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False, gamma=venv.gamma)
        eval_env.obs_rms = venv.obs_rms
    returns, obs = [], eval_env.reset()
    while len(returns) < episodes:
        action, _ = model.predict(obs, deterministic=True)
        obs, _, done, info = eval_env.step(action)
        if done[0]:
            returns.append(float(info[0]["episode"]["r"]))
    return float(np.mean(returns))


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that have been waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def train(args: argparse.Namespace) -> dict:
    model, venv = build(args.env, None, args.seed, args.vec)
    start, cpu = time.perf_counter(), cpu_seconds()
    model.learn(total_timesteps=args.total_env_steps)
    seconds = time.perf_counter() - start
    out = {"peer": "sb3", "env": args.env, "env_steps": int(model.num_timesteps), "train_seconds": seconds,
           "cpu_seconds": cpu_seconds() - cpu, "vec": args.vec}  # fmt: skip
    if args.eval_episodes:
        start = time.perf_counter()
        out["eval_return"] = evaluate(model, venv, ENV_IDS[args.env], args.eval_episodes)
        out["eval_seconds"] = time.perf_counter() - start
    return out


class SolveCallback(BaseCallback):
    """After each update (the start of the next rollout), evaluate when env steps pass a multiple of ``every``; stop
    learning at the first evaluation whose mean return reaches ``target``. Evaluation time (and its CPU time) is
    summed apart. With ``VecNormalize`` (HalfCheetah) the evaluation env normalises observations with the training
    statistics of the moment, frozen, and scores raw returns (``Monitor``'s), as ``evaluate`` does."""

    def __init__(self, eval_env, every: int, episodes: int, target: float) -> None:
        super().__init__()
        self.eval_env, self.every, self.episodes, self.target = eval_env, every, episodes, target
        self.next_eval, self.eval_seconds, self.eval_cpu_seconds, self.crossed_at = every, 0.0, 0.0, None
        self.history: list[tuple[int, float]] = []

    def _on_rollout_start(self) -> None:
        if self.crossed_at is not None or self.num_timesteps < self.next_eval:
            return
        while self.next_eval <= self.num_timesteps:
            self.next_eval += self.every
        start, cpu = time.perf_counter(), cpu_seconds()
        normalize = self.model.get_vec_normalize_env()
        if normalize is not None:
            self.eval_env.obs_rms = normalize.obs_rms.copy()
        mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=self.episodes, deterministic=True)
        self.eval_seconds += time.perf_counter() - start
        self.eval_cpu_seconds += cpu_seconds() - cpu
        self.history.append((int(self.num_timesteps), float(mean)))
        if mean >= self.target:
            self.crossed_at = int(self.num_timesteps)

    def _on_step(self) -> bool:
        return self.crossed_at is None


def solve(args: argparse.Namespace) -> dict:
    model, venv = build(args.env, None, args.seed, "dummy")
    eval_env = make_vec_env(ENV_IDS[args.env], n_envs=1, seed=10_000 + args.seed)
    if isinstance(venv, VecNormalize):
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False, gamma=venv.gamma)
    callback = SolveCallback(eval_env, args.eval_every, args.eval_episodes, args.target)
    start, cpu = time.perf_counter(), cpu_seconds()
    model.learn(total_timesteps=args.total_env_steps, callback=callback)
    wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    return {"peer": "sb3", "env": args.env, "seed": args.seed, "crossed": callback.crossed_at is not None,
            "env_steps": callback.crossed_at or int(model.num_timesteps), "train_seconds": wall - callback.eval_seconds,
            "cpu_seconds": cpu - callback.eval_cpu_seconds, "eval_seconds": callback.eval_seconds,
            "history": callback.history}  # fmt: skip


def collect(args: argparse.Namespace) -> dict:
    model, venv = build(args.env, args.num_envs, args.seed, args.vec)
    from stable_baselines3.common.buffers import RolloutBuffer

    venv = model.env  # as PPO wrapped it (VecTransposeImage for images)
    buffer = RolloutBuffer(args.steps, venv.observation_space, venv.action_space, "cpu", n_envs=venv.num_envs)
    _, callback = model._setup_learn(10**9, None)  # what learn() does first: reset, episode buffers, callback
    model.collect_rollouts(venv, callback, buffer, n_rollout_steps=args.steps)  # warm-up
    best_collect = 0.0
    for _ in range(args.repeats):
        buffer.reset()
        start = time.perf_counter()
        model.collect_rollouts(venv, callback, buffer, n_rollout_steps=args.steps)
        best_collect = max(best_collect, args.steps * venv.num_envs / (time.perf_counter() - start))
    best_raw = 0.0
    for _ in range(args.repeats):
        actions = [np.stack([venv.action_space.sample() for _ in range(venv.num_envs)]) for _ in range(args.steps)]
        start = time.perf_counter()
        for action in actions:
            venv.step(action)
        best_raw = max(best_raw, args.steps * venv.num_envs / (time.perf_counter() - start))
    venv.close()
    return {"peer": "sb3", "env": args.env, "vec": args.vec, "num_envs": venv.num_envs, "collect_sps": best_collect,
            "raw_sps": best_raw}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["train", "collect", "solve"])
    parser.add_argument("--env", default="halfcheetah")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total-env-steps", type=lambda v: int(float(v)), default=100_000, help="1e6 or 1000000")
    parser.add_argument("--eval-episodes", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=1000, help="collect: ticks per timed rollout")
    parser.add_argument("--repeats", type=int, default=3, help="collect: best of this many")
    parser.add_argument("--vec", choices=["dummy", "subproc"], default="dummy")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--eval-every", type=int, default=1024, help="solve: env steps between evaluations")
    parser.add_argument("--target", type=float, default=475.0, help="solve: mean evaluation return that stops it")
    args = parser.parse_args()
    if args.mode == "solve" and args.eval_episodes == 0:
        args.eval_episodes = 20
    torch.set_num_threads(args.threads)
    modes = {"train": train, "collect": collect, "solve": solve}
    print(json.dumps(modes[args.mode](args)), flush=True)


if __name__ == "__main__":
    main()
