"""The serial reference for actor backends: collectors seeded at each actor's offset, and the check that gathered
rollouts equal theirs column by column, episode stats included."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rl_lightning.data.actors.gather import episode_means, episode_sums
from rl_lightning.data.collector import Collector
from rl_lightning.envs.base import BatchedEnv


def assert_same(actor_batch: TensorDict, serial_batch: TensorDict) -> None:
    """Every column of ``actor_batch`` equals ``serial_batch``'s, names and shapes too."""
    names = sorted(serial_batch.keys(True, True))
    assert sorted(actor_batch.keys(True, True)) == names
    for name in names:
        assert actor_batch[name].shape == serial_batch[name].shape, name
        assert torch.equal(actor_batch[name], serial_batch[name]), name


def assert_equal_to_serial_actors(
    gathered: list[Any], env: Any, module: Any, num_actors: int, envs_per_actor: int, num_steps: int, seed: int
) -> None:
    """``gathered`` (``ActorRollout``s at version 0) equal what one serial collector per actor gives: actor ``i``'s
    envs seeded ``seed + i·envs_per_actor``, its sampler 10_007 past that (``gather.actor_spec``), joined on the env
    axis; their ``rollout/*`` means (never NaN here) and env steps too."""
    serial = []
    for i in range(num_actors):
        first = seed + i * envs_per_actor
        collector = Collector(BatchedEnv(env, envs_per_actor, "cpu", first), seed=first + 10_007)
        serial.append((collector, module.acting_policy(collector.env, training=True)))
    for rollout in gathered:
        parts, stats = [], []
        for collector, policy in serial:
            parts.append(collector.rollout(policy, num_steps, 0))
            means = collector.episode_stats()
            stats.append({name: (float(v), float(collector.stat_counts[name])) for name, v in means.items()})
        assert rollout.batch.shape == torch.Size([num_steps, num_actors * envs_per_actor])
        assert_same(rollout.batch, torch.cat(parts, dim=1))
        for name, value in episode_means(episode_sums(stats)).items():
            assert not math.isnan(value), name
            assert rollout.stats[name] == pytest.approx(value), name
        assert rollout.env_steps == num_actors * envs_per_actor * num_steps
