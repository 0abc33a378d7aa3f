"""sb3-contrib ``RecurrentPPO`` on a memory task, run in its own virtual environment (not the package's).

    SB3C_VENV/bin/python benchmarks/peers/sb3_recurrent_ppo.py --task cartpole --seed 0 [--eval-every 5120 ...]

SB3C_VENV holds ``torch==2.13.0`` (installed first, the CPU wheel), ``sb3-contrib`` and ``gymnasium`` (plus ``popgym``
for the ``repeat_*`` tasks, ``minigrid`` for ``minigrid``). Tasks:

* ``cartpole``: rl-baselines3-zoo's ``hyperparams/ppo_lstm.yml`` CartPoleNoVel-v1 settings
  (``configs/ppo_lstm_cartpole_novel.yaml`` quotes them) on Gymnasium's CartPole-v1 observing ``[x, theta]``;
* ``repeat_first`` / ``repeat_previous``: POPGym's RepeatFirstEasy / RepeatPreviousEasy with RecurrentPPO's defaults
  (``configs/ppo_lstm_repeat_first.yaml`` quotes them);
* ``minigrid``: MiniGrid-MemoryS7-v0 (the zoo's ``ppo`` MiniGrid settings on an LSTM of 64; a probe, see
  benchmarks/NOTES.md).

Training stops at the first evaluation (``--eval-episodes`` deterministic episodes, frozen ``VecNormalize`` statistics
where the task normalises, every ``--eval-every`` env steps, checked when a rollout starts, i.e. after each update)
whose mean return reaches ``--target``; prints one JSON line: env steps there and training seconds (evaluation time
taken out), evaluation scores to stderr as they come.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecEnv, VecNormalize


def no_velocity(env: gym.Env) -> gym.Env:
    low, high = env.observation_space.low[[0, 2]], env.observation_space.high[[0, 2]]
    space = gym.spaces.Box(low, high, dtype=np.float32)
    return gym.wrappers.TransformObservation(env, lambda obs: obs[[0, 2]].astype(np.float32), space)


def linear(start: float):
    return lambda progress_remaining: progress_remaining * start


class SolveCallback(BaseCallback):
    def __init__(self, eval_env: VecEnv, every: int, episodes: int, target: float) -> None:
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
        if isinstance(self.eval_env, VecNormalize):  # frozen training statistics
            self.eval_env.obs_rms = self.training_env.obs_rms
        mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=self.episodes, deterministic=True)
        self.eval_seconds += time.perf_counter() - begin
        self.curve.append((self.num_timesteps, float(mean)))
        print(f"eval at {self.num_timesteps}: {mean:.3f}", file=sys.stderr, flush=True)
        if mean >= self.target:
            self.solved_at = self.num_timesteps
            self.train_seconds_at_solve = time.perf_counter() - self.start - self.eval_seconds

    def _on_step(self) -> bool:
        return self.solved_at is None


def memory_obs(env: gym.Env) -> gym.Env:
    """MiniGrid's 7x7x3 egocentric grid only (minigrid's ``ImgObsWrapper``), as float32 so ``VecNormalize`` scales it
    (a uint8 image would also be divided by 255 by SB3's preprocessing)."""
    from minigrid.wrappers import ImgObsWrapper

    return gym.wrappers.DtypeObservation(ImgObsWrapper(env), np.float32)


def cartpole_model(seed: int) -> tuple[RecurrentPPO, VecNormalize]:
    """rl-zoo ``ppo_lstm.yml`` CartPoleNoVel-v1."""
    make = {"env_id": "CartPole-v1", "wrapper_class": no_velocity}
    env = VecNormalize(make_vec_env(n_envs=8, seed=seed, **make), norm_obs=True, norm_reward=False, gamma=0.98)
    eval_env = VecNormalize(make_vec_env(n_envs=10, seed=10_000 + seed, **make), training=False,
                            norm_obs=True, norm_reward=False)  # fmt: skip
    policy_kwargs = {"ortho_init": False, "activation_fn": torch.nn.ReLU, "lstm_hidden_size": 64,
                     "enable_critic_lstm": True, "net_arch": {"pi": [64], "vf": [64]}}  # fmt: skip
    model = RecurrentPPO("MlpLstmPolicy", env, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8,
                         learning_rate=linear(1e-3), clip_range=linear(0.2), ent_coef=0.0, seed=seed,
                         policy_kwargs=policy_kwargs, device="cpu")  # fmt: skip
    return model, eval_env


def memory_model(seed: int) -> tuple[RecurrentPPO, VecNormalize]:
    """MiniGrid-MemoryS7-v0: rl-zoo ``ppo.yml``'s MiniGrid settings (DoorKey-5x5) on ``MlpLstmPolicy``'s defaults,
    batch_size 128 (RecurrentPPO's default: one env's 128-step sequence per minibatch, as rl_lightning's layout)."""
    make = {"env_id": "MiniGrid-MemoryS7-v0", "wrapper_class": memory_obs}
    env = VecNormalize(make_vec_env(n_envs=8, seed=seed, **make), norm_obs=True, norm_reward=False, gamma=0.99)
    eval_env = VecNormalize(make_vec_env(n_envs=10, seed=10_000 + seed, **make), training=False,
                            norm_obs=True, norm_reward=False)  # fmt: skip
    model = RecurrentPPO("MlpLstmPolicy", env, n_steps=128, batch_size=128, gamma=0.99, gae_lambda=0.95,
                         learning_rate=2.5e-4, clip_range=0.2, ent_coef=0.0, seed=seed, device="cpu",
                         policy_kwargs={"lstm_hidden_size": 64}, n_epochs=4)  # fmt: skip
    return model, eval_env


def popgym_model(env_id: str, seed: int) -> tuple[RecurrentPPO, VecEnv]:
    """A POPGym card task: sb3-contrib RecurrentPPO's defaults (n_steps 128, batch_size 128, 10 epochs, lr 3e-4,
    gamma 0.99, gae_lambda 0.95, ent_coef 0) with 8 envs and an LSTM of 64; no ``VecNormalize`` (the observation
    is ``Discrete(4)``, one-hot encoded by SB3)."""
    make = {"env_id": env_id}
    env = make_vec_env(n_envs=8, seed=seed, **make)
    eval_env = make_vec_env(n_envs=10, seed=10_000 + seed, **make)
    model = RecurrentPPO("MlpLstmPolicy", env, n_steps=128, batch_size=128, n_epochs=10, gamma=0.99, gae_lambda=0.95,
                         learning_rate=3e-4, clip_range=0.2, ent_coef=0.0, seed=seed, device="cpu",
                         policy_kwargs={"lstm_hidden_size": 64})  # fmt: skip
    return model, eval_env


TASKS = {
    "cartpole": cartpole_model,
    "repeat_first": functools.partial(popgym_model, "popgym-RepeatFirstEasy-v0"),
    "repeat_previous": functools.partial(popgym_model, "popgym-RepeatPreviousEasy-v0"),
    "minigrid": memory_model,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", choices=sorted(TASKS), default="cartpole")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--eval-every", type=int, default=5_120)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--target", type=float, default=475.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.task == "minigrid":
        import minigrid  # noqa: F401  (registers the MiniGrid ids)
    if args.task.startswith("repeat_"):
        import popgym  # noqa: F401  (registers the POPGym ids)
    model, eval_env = TASKS[args.task](args.seed)
    callback = SolveCallback(eval_env, args.eval_every, args.eval_episodes, args.target)
    start = time.perf_counter()
    model.learn(args.steps, callback=callback)
    wall = time.perf_counter() - start
    print(json.dumps({"task": args.task, "seed": args.seed, "solved_at": callback.solved_at,
                      "train_seconds_at_solve": callback.train_seconds_at_solve, "train_seconds": wall -
                      callback.eval_seconds, "env_steps": model.num_timesteps, "curve": callback.curve}))  # fmt: skip


if __name__ == "__main__":
    main()
