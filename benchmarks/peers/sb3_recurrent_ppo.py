"""sb3-contrib ``RecurrentPPO`` on rl-zoo's CartPoleNoVel-v1, run in its own virtual environment (not the package's).

    SB3C_VENV/bin/python benchmarks/peers/sb3_recurrent_ppo.py --seed 0 [--eval-every 5120 --eval-episodes 20]

SB3C_VENV holds ``torch==2.13.0`` (installed first, the CPU wheel), ``sb3-contrib`` and ``gymnasium``. Settings are
rl-baselines3-zoo's ``hyperparams/ppo_lstm.yml`` for CartPoleNoVel-v1 (``configs/ppo_lstm_cartpole_novel.yaml`` quotes
them). The env is Gymnasium's CartPole-v1 observing ``[x, theta]`` (the zoo's ``CartPoleNoVelEnv``). Training stops
at the first evaluation (``--eval-episodes`` deterministic episodes, frozen ``VecNormalize`` statistics, every
``--eval-every`` env steps, checked when a rollout starts, i.e. after each update) whose mean return reaches
``--target``; prints one JSON line: env steps there and training seconds (evaluation time taken out).
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecNormalize


def no_velocity(env: gym.Env) -> gym.Env:
    low, high = env.observation_space.low[[0, 2]], env.observation_space.high[[0, 2]]
    space = gym.spaces.Box(low, high, dtype=np.float32)
    return gym.wrappers.TransformObservation(env, lambda obs: obs[[0, 2]].astype(np.float32), space)


def linear(start: float):
    return lambda progress_remaining: progress_remaining * start


class SolveCallback(BaseCallback):
    def __init__(self, eval_env: VecNormalize, every: int, episodes: int, target: float) -> None:
        super().__init__()
        self.eval_env, self.every, self.episodes, self.target = eval_env, every, episodes, target
        self.next_eval, self.eval_seconds, self.curve = every, 0.0, []
        self.solved_at: int | None = None
        self.train_seconds_at_solve: float | None = None
        self.start = time.perf_counter()

    def _on_rollout_start(self) -> None:
        if self.num_timesteps < self.next_eval or self.solved_at is not None:
            return
        self.next_eval += self.every
        begin = time.perf_counter()
        self.eval_env.obs_rms = self.training_env.obs_rms
        mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=self.episodes, deterministic=True)
        self.eval_seconds += time.perf_counter() - begin
        self.curve.append((self.num_timesteps, float(mean)))
        if mean >= self.target:
            self.solved_at = self.num_timesteps
            self.train_seconds_at_solve = time.perf_counter() - self.start - self.eval_seconds

    def _on_step(self) -> bool:
        return self.solved_at is None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--eval-every", type=int, default=5_120)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--target", type=float, default=475.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    make = {"env_id": "CartPole-v1", "wrapper_class": no_velocity}
    env = VecNormalize(make_vec_env(n_envs=8, seed=args.seed, **make), norm_obs=True, norm_reward=False, gamma=0.98)
    eval_env = VecNormalize(make_vec_env(n_envs=10, seed=10_000 + args.seed, **make), training=False,
                            norm_obs=True, norm_reward=False)  # fmt: skip
    policy_kwargs = {"ortho_init": False, "activation_fn": torch.nn.ReLU, "lstm_hidden_size": 64,
                     "enable_critic_lstm": True, "net_arch": {"pi": [64], "vf": [64]}}  # fmt: skip
    model = RecurrentPPO("MlpLstmPolicy", env, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8,
                         learning_rate=linear(1e-3), clip_range=linear(0.2), ent_coef=0.0, seed=args.seed,
                         policy_kwargs=policy_kwargs, device="cpu")  # fmt: skip
    callback = SolveCallback(eval_env, args.eval_every, args.eval_episodes, args.target)
    start = time.perf_counter()
    model.learn(args.steps, callback=callback)
    wall = time.perf_counter() - start
    print(json.dumps({"seed": args.seed, "solved_at": callback.solved_at,
                      "train_seconds_at_solve": callback.train_seconds_at_solve, "train_seconds": wall -
                      callback.eval_seconds, "env_steps": model.num_timesteps, "curve": callback.curve}))  # fmt: skip


if __name__ == "__main__":
    main()
