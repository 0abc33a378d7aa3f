"""The PPO collector's episode stats average finished episodes only (regression: weights were ignored)."""

from __future__ import annotations

import math

import pytest
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data import Collector
from rl_lightning.envs import BatchedEnv, CartPole, Pendulum
from rl_lightning.envs.random_action import random_action


def _episodes(batch):
    """(return, length) of every episode that ended in ``batch``, summed from its own rewards, env by env."""
    done = (batch[keys.TERMINATED] | batch[keys.TRUNCATED]).T
    episodes = []
    for row, rewards in zip(done.tolist(), batch[keys.REWARD].T.tolist(), strict=True):
        start = 0
        for t, flag in enumerate(row):
            if flag:
                episodes.append((math.fsum(rewards[start : t + 1]), t + 1 - start))
                start = t + 1
    return episodes


def _random_policy(spec):
    def policy(obs, gen):
        return TensorDict({keys.ACTION: random_action(spec, obs, gen)}, batch_size=obs.batch_size)

    return policy


@pytest.mark.parametrize(
    "env", [CartPole(max_episode_steps=25), Pendulum(max_episode_steps=25)], ids=["cartpole", "pendulum"]
)
def test_episode_stats_average_only_finished_episodes(env):
    """Pendulum's rewards vary per step, so the return is checked against the rewards, not the lengths."""
    collector = Collector(BatchedEnv(env, 4, seed=0), seed=1)
    policy = _random_policy(env.spec)
    batch = collector.rollout(policy, 70, 0)
    episodes = _episodes(batch)
    assert len(episodes) >= 8  # two or more per env; the unfinished tails must not count
    stats = collector.episode_stats()
    returns = [r for r, _ in episodes]
    assert float(stats["episode_length"]) == pytest.approx(sum(n for _, n in episodes) / len(episodes))
    assert float(stats["episode_return"]) == pytest.approx(sum(returns) / len(returns), rel=1e-5)
    fresh = Collector(BatchedEnv(CartPole(), 4, seed=0), seed=1)
    fresh.rollout(_random_policy(CartPole().spec), 2, 0)  # no CartPole episode ends within 2 steps of a reset
    assert math.isnan(float(fresh.episode_stats()["episode_return"]))
