"""EnvPool's same-step adapter: the rows that finish, and observation wrappers, seen from outside.

The adapter resets finished envs inside the step that ends them; these tests pin what the contract check of
tests/test_env_gymnasium_backends.py cannot see: a finished row's ``final_obs`` is the true last observation (the
simulator's own dynamics from the previous one, not the reset that follows), and each observation the pool makes
goes through a stateful observation wrapper exactly once.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

from rl_lightning import keys
from rl_lightning.envs import BatchedEnv, ClassSpec

pytest.importorskip("envpool")
from rl_lightning.envs import EnvPoolEnv  # noqa: E402

NUM_ENVS = 3


class CountObservations(gymnasium.ObservationWrapper):
    """A stateful observation wrapper: appends how many observations it has seen, and counts them."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        low, high = env.observation_space.low, env.observation_space.high
        self.observation_space = gymnasium.spaces.Box(
            np.append(low, 0).astype(np.float32), np.append(high, np.inf).astype(np.float32), dtype=np.float32
        )
        self.calls = 0

    def observation(self, observation: np.ndarray) -> np.ndarray:
        self.calls += 1
        return np.append(observation, self.calls).astype(np.float32)


def play(core, steps: int, seed: int = 1) -> tuple[list, list[torch.Tensor]]:
    env = BatchedEnv(core, NUM_ENVS, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    outs = [env.reset()]
    actions = [torch.randint(0, 2, (NUM_ENVS,), generator=gen) for _ in range(steps)]
    outs += [env.step(action) for action in actions]
    return outs, actions


def test_final_obs_of_finished_rows_follows_the_dynamics_not_the_reset() -> None:
    """CartPole with 5-step episodes: every finished row's ``final_obs`` is Gymnasium's step from the previous
    observation and action (EnvPool and Gymnasium share CartPole's dynamics), and its ``obs`` is a new start."""
    core = EnvPoolEnv("CartPole-v1", {"max_episode_steps": 5})
    outs, actions = play(core, 24)
    core.close()
    reference = gymnasium.make("CartPole-v1").unwrapped
    reference.reset(seed=0)
    finished = 0
    for t, out in enumerate(outs[1:]):
        for row in np.flatnonzero((out[keys.TERMINATED] | out[keys.TRUNCATED]).numpy()):
            reference.state = outs[t][keys.OBS][row].double().numpy()
            expected, _, terminated, _, _ = reference.step(int(actions[t][row]))
            np.testing.assert_allclose(out[keys.FINAL_OBS][row].numpy(), expected, atol=1e-5)
            assert bool(out[keys.TERMINATED][row]) == terminated
            assert np.abs(out[keys.OBS][row].numpy()).max() <= 0.05  # CartPole starts within +-0.05
            finished += 1
    assert finished >= 2 * NUM_ENVS


def test_observation_wrappers_see_each_observation_once() -> None:
    """A stateful wrapper counts every observation the pool makes once: the first ones, one per row per step, and
    the reset observation of each finished row (not the step's observations again for ``final_obs``)."""
    wrapper = ClassSpec("tests.test_envpool_adapter.CountObservations", {})
    core = EnvPoolEnv("CartPole-v1", {"max_episode_steps": 5}, wrappers=[wrapper])
    outs, _ = play(core, 12)
    (counter,) = core._chain
    resets = sum(int((out[keys.TERMINATED] | out[keys.TRUNCATED]).sum()) for out in outs[1:])
    assert resets >= NUM_ENVS
    assert counter.calls == NUM_ENVS + 12 * NUM_ENVS + resets
    core.close()
