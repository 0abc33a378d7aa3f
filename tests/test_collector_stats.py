"""The PPO collector's episode stats average finished episodes only (regression: weights were ignored)."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data import Collector
from rl_lightning.envs import BatchedEnv, CartPole


def test_episode_stats_average_only_finished_episodes():
    collector = Collector(BatchedEnv(CartPole(max_episode_steps=25), 4, seed=0), seed=1)

    def policy(obs, gen):
        action = torch.randint(0, 2, obs.batch_size, generator=gen)
        return TensorDict({keys.ACTION: action}, batch_size=obs.batch_size)

    batch = collector.rollout(policy, 70, 0)
    done = (batch[keys.TERMINATED] | batch[keys.TRUNCATED]).T
    lengths = []
    for row in done:
        start = 0
        for t, flag in enumerate(row.tolist()):
            if flag:
                lengths.append(t + 1 - start)
                start = t + 1
    stats = collector.episode_stats()
    assert float(stats["episode_length"]) == pytest.approx(sum(lengths) / len(lengths))
    assert float(stats["episode_return"]) == pytest.approx(sum(lengths) / len(lengths))  # CartPole: 1 per step
    fresh = Collector(BatchedEnv(CartPole(), 4, seed=0), seed=1)
    fresh.rollout(policy, 2, 0)  # no CartPole episode ends within 2 steps of a reset
    assert math.isnan(float(fresh.episode_stats()["episode_return"]))
