"""Gymnasium spaces ↔ the env contract, in one place for every backend.

``env_spec`` reads the spaces once; ``obs_tensor`` turns a batch of observations into the tensor the
contract carries; ``gym_actions`` turns a batch of torch actions into what the env's action space takes.
Today observations are ``Box`` spaces cast to float32; keeping other dtypes or ``Dict`` spaces (nested
TensorDict keys) is a change to these functions only.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

from rl_lightning.envs.base import EnvSpec
from rl_lightning.errors import ConfigError


def env_spec(name: str, obs_space: spaces.Space, act_space: spaces.Space, max_episode_steps: int) -> EnvSpec:
    """Build an ``EnvSpec`` from single-env spaces, or raise a one-line ``ConfigError`` listing what is supported."""
    if not isinstance(obs_space, spaces.Box):
        raise ConfigError(
            f"GymnasiumEnv({name!r}): observation space {obs_space} is not supported; "
            "supported: Box observations (cast to float32)"
        )
    common = {"name": name, "obs_shape": tuple(obs_space.shape), "max_episode_steps": int(max_episode_steps)}
    if isinstance(act_space, spaces.Discrete):
        return EnvSpec(discrete=True, num_actions=int(act_space.n), **common)
    if isinstance(act_space, spaces.Box):
        return EnvSpec(
            discrete=False,
            action_shape=tuple(act_space.shape),
            action_low=tuple(float(v) for v in act_space.low.reshape(-1)),
            action_high=tuple(float(v) for v in act_space.high.reshape(-1)),
            **common,
        )
    raise ConfigError(
        f"GymnasiumEnv({name!r}): action space {act_space} is not supported; supported: Discrete(n) and Box"
    )


def obs_tensor(obs: np.ndarray, device: torch.device | None) -> torch.Tensor:
    """A ``[B, *obs_shape]`` batch of observations as the contract's float32 tensor on ``device``."""
    return torch.as_tensor(np.asarray(obs), dtype=torch.float32).to(device)


def gym_actions(action: torch.Tensor, space: spaces.Space) -> np.ndarray:
    """A ``[B, ...]`` torch action batch in ``space``'s terms: ``Discrete`` offset by ``start``, ``Box`` clipped."""
    batch = action.detach().cpu().numpy()
    if isinstance(space, spaces.Discrete):
        return batch.astype(np.int64) + int(space.start)
    shaped = batch.reshape(batch.shape[0], *space.shape)
    return np.clip(shaped, space.low, space.high).astype(space.dtype)
