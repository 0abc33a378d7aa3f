"""``actor_env_splits: 2`` (``SplitCollector``): each actor steps its envs in two groups, one group's env step beside
the other group's policy call. The split moves work in time only: the data equal two actors of half the envs."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

from rl_lightning.algos import PPO
from rl_lightning.data.actors import ActorPool, PoolSettings
from rl_lightning.data.actors.setup import check_actor_config
from rl_lightning.data.actors.split import SplitCollector
from rl_lightning.data.collector import Collector
from rl_lightning.envs import CartPole, GymnasiumEnv
from rl_lightning.envs.base import BatchedEnv
from rl_lightning.errors import ConfigError

SEED, HALF, STEPS = 100, 2, 16


def _envpool_breakout():
    pytest.importorskip("envpool")
    from rl_lightning.envs import EnvPoolEnv

    return EnvPoolEnv("Breakout", atari_preset="baselines")


def _ppo(env):
    return PPO(env_spec=env.spec, hidden_sizes=(16,))


def _spo(env):
    from tests.helpers import tiny_spo

    return tiny_spo(env)[0]


def _group(env, k: int) -> Collector:
    """Group ``k`` of an actor's ``2 * HALF`` envs: the seeds an actor of ``HALF`` envs at that offset would have,
    and its own copy of the env core (a backend's live pool lives in it)."""
    seed = SEED + k * HALF
    return Collector(BatchedEnv(copy.deepcopy(env), HALF, "cpu", seed), seed=seed + 10_007)


def _serial_halves(env, module, rollouts: int) -> tuple[list[TensorDict], list[dict[str, torch.Tensor]]]:
    """What two serial collectors of ``HALF`` envs each (an actor's two groups' seeds) collect, side by side."""
    groups = [_group(env, k) for k in (0, 1)]
    policies = [module.acting_policy(group.env, training=True) for group in groups]
    batches, stats = [], []
    for _ in range(rollouts):
        batches.append(torch.cat([g.rollout(p, STEPS, 0) for g, p in zip(groups, policies, strict=True)], dim=1))
        stats.append(_pooled_stats(groups))
    for group in groups:
        group.close()
    return batches, stats


def _pooled_stats(groups: list[Collector]) -> dict[str, torch.Tensor]:
    counts = [group.finished.count() for group in groups]
    means = [group.episode_stats() for group in groups]
    total = sum(counts)
    return {name: sum(torch.nan_to_num(m[name]) * c for m, c in zip(means, counts, strict=True)) / total
            for name in ("episode_return", "episode_length")}  # fmt: skip


def _assert_same(split: TensorDict, serial: TensorDict) -> None:
    names = sorted(serial.keys(True, True))
    assert sorted(split.keys(True, True)) == names
    for name in names:
        assert torch.equal(split[name], serial[name]), name


@pytest.mark.parametrize(
    ("make_env", "build"),
    [
        (CartPole, _ppo),
        (_envpool_breakout, _ppo),  # the backend the split is for: C++ steps on the helper thread
        (lambda: GymnasiumEnv("CartPole-v1"), _spo),  # SPO's search is bound to each group's own envs
    ],
    ids=["ppo-torch", "ppo-envpool-breakout", "spo-gymnasium"],
)
def test_a_split_rollout_equals_two_half_collectors_side_by_side(make_env, build):
    env = make_env()
    module = build(env)
    groups = [_group(env, k) for k in (0, 1)]
    split = SplitCollector(groups)
    policies = [module.acting_policy(group.env, training=True) for group in groups]
    try:
        rollouts = 3 if env.spec.name != "Breakout" else 2
        got, got_stats = [], []
        for _ in range(rollouts):
            got.append(split.rollout(policies, STEPS, 0))
            got_stats.append(split.episode_stats())
    finally:
        split.close()
    serial, serial_stats = _serial_halves(env, module, rollouts)
    for split_batch, serial_batch in zip(got, serial, strict=True):
        _assert_same(split_batch, serial_batch)
    for mine, theirs in zip(got_stats, serial_stats, strict=True):
        for name, value in theirs.items():
            torch.testing.assert_close(mine[name], value, equal_nan=True, msg=name)


def _envpool_cartpole():
    pytest.importorskip("envpool")
    from rl_lightning.envs import EnvPoolEnv

    return EnvPoolEnv("CartPole-v1")


@pytest.mark.parametrize("make_env", [CartPole, _envpool_cartpole], ids=["torch", "envpool"])
def test_an_actor_process_with_split_envs_hands_back_the_same_rollouts(make_env):
    env = make_env()
    module = _ppo(env)
    settings = PoolSettings(1, 2 * HALF, STEPS, 1, 3, 60.0, SEED, env_splits=2)
    pool = ActorPool(settings, env, module.policy_factory(), module.state_dict())
    try:
        pool.publish(module.state_dict(), 0)
        from_actor = [pool.next_rollout(0).batch for _ in range(2)]
    finally:
        pool.close()
    serial, _ = _serial_halves(env, module, 2)
    for actor_batch, serial_batch in zip(from_actor, serial, strict=True):
        _assert_same(actor_batch, serial_batch)


def _datamodule(**overrides):
    settings = {"num_actors": 1, "max_policy_lag": 1, "actor_max_failures": 3, "actor_heartbeat_s": 60.0,
                "num_envs": 4, "actor_env_splits": 2, "selfplay": None, "compile": False}  # fmt: skip
    settings.update(overrides)
    return SimpleNamespace(**settings)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"actor_env_splits": 3}, "data.actor_env_splits=3: must be 1 (off) or 2"),
        ({"num_actors": 0}, "data.actor_env_splits=2 splits the envs of actor processes"),
        ({"num_envs": 6, "num_actors": 2}, "halves each actor's 3 envs (num_envs / num_actors), which is odd"),
        ({"selfplay": object()}, "self-play and DreamerV3's sequence collector step all their envs together"),
    ],
    ids=["three", "no-actors", "odd-envs-per-actor", "self-play"],
)
def test_split_settings_that_cannot_run_are_refused_in_one_line(overrides, expected):
    with pytest.raises(ConfigError, match=None) as refused:
        check_actor_config(_datamodule(**overrides), object())
    assert expected in str(refused.value)
    assert "\n" not in str(refused.value)
