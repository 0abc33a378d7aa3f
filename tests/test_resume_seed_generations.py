"""A run that switches between serial collection and actors at a resume starts past every env seed stream it used:
its first episodes after the switch are not the run's first episodes again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs import CartPole
from rl_lightning.envs.random_action import random_action


def _on_policy(num_actors: int) -> tuple[Any, Any]:
    from rl_lightning.algos import PPO
    from rl_lightning.data import OnPolicyDataModule

    dm = OnPolicyDataModule(CartPole(), num_envs=4, num_steps=8, total_env_steps=1024, seed=100, num_actors=num_actors)
    return PPO(env_spec=dm.env_spec, hidden_sizes=(16,)), dm


def _replay(num_actors: int) -> tuple[Any, Any]:
    from rl_lightning.algos import SPO
    from rl_lightning.data import ReplayDataModule

    dm = ReplayDataModule(
        CartPole(), num_envs=4, rollout_length=8, total_env_steps=1024, buffer_size=256, batch_size=4,
        sequence_length=4, gradient_steps=1, seed=100, num_actors=num_actors,
    )  # fmt: skip
    module = SPO(env_spec=dm.env_spec, hidden_sizes=(16,), num_particles=4, search_depth=2, resample_period=2)
    return module, dm


def _dreamer(num_actors: int) -> tuple[Any, Any]:
    from rl_lightning.algos import DreamerV3
    from rl_lightning.data import DreamerDataModule

    dm = DreamerDataModule(
        CartPole(), num_envs=4, rollout_length=8, total_env_steps=1024, buffer_size=256, batch_size=2,
        sequence_length=4, replay_ratio=0.25, learning_starts=16, commit_stride=2, seed=100, num_actors=num_actors,
    )  # fmt: skip
    return DreamerV3(env_spec=dm.env_spec, size="tiny", horizon=3, bins=15, warmup_steps=0), dm


def _first_rows(build: Callable[[int], tuple[Any, Any]], num_actors: int, state: dict | None) -> tuple[Any, dict]:
    """One rollout of a datamodule built fresh (resumed from ``state``): its first observations (the reset
    observations its env seeds give) and its checkpoint state."""
    module, dm = build(num_actors)
    dm.setup("fit")  # as Lightning resumes: setup, then the datamodule's state
    if state is not None:
        dm.load_state_dict(state)
    try:
        if num_actors:
            rows = dm.actor_rollout(module)[0]
        else:
            spec = dm.env_spec
            policy = lambda obs, gen: TensorDict(  # noqa: E731 - any policy: only the reset observations are read
                {keys.ACTION: random_action(spec, obs, gen)}, batch_size=obs.batch_size
            )
            rows = dm.collector.rollout(policy, 8, 0)
        return rows[keys.OBS][0].clone(), dm.state_dict()
    finally:
        dm.teardown("fit")


@pytest.mark.parametrize(
    "build",
    [
        _on_policy,
        _replay,
        _dreamer,
    ],
    ids=["on-policy", "replay", "dreamer"],
)
def test_switching_between_serial_and_actors_at_resume_never_replays_the_runs_first_env_seeds(build):
    """serial → actors → serial → actors, each segment resumed from the last one's checkpoint: every segment's
    first observations (its envs' resets) differ from every earlier segment's, so no early episode repeats."""
    starts, state = [], None
    for num_actors in (0, 1, 0, 1):
        first, state = _first_rows(build, num_actors, state)
        for earlier, before in enumerate(starts):
            assert not torch.equal(first, before), f"segment {len(starts)} starts as segment {earlier} did"
        starts.append(first)
