"""Gymnasium spaces ↔ the env contract, in one place for every backend.

``env_spec`` reads the spaces once (and refuses, in one line, what no algorithm can take); ``stack_obs`` batches
per-env observations; ``obs_tensor`` turns a batch into what the contract carries; ``with_final_obs`` densifies
Gymnasium's ``final_obs`` object array; ``gym_actions`` turns torch actions into what the action space takes.

Observations keep their dtype (``uint8`` stays ``uint8``, ``float64`` stays ``float64``: networks convert inside
their encoder); ``Discrete(n, start)`` observations become int64 indices ``0..n-1``; a ``Dict`` observation becomes
a TensorDict of its keys (nested ``Dict``s nest), one leaf per key. Image keys (rank-3 ``uint8`` boxes, either
layout) pass as they are: the network's encoder converts them (``networks/cnn.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict

from rl_lightning.envs.base import EnvSpec, ObsLeaf
from rl_lightning.errors import ConfigError

OBS_SUPPORTED = "Box (any dtype), Discrete, and Dict of those (image and vector keys; nested Dicts allowed)"
ACTIONS_SUPPORTED = "Discrete, Box, MultiDiscrete, MultiBinary"


def env_spec(name: str, obs_space: spaces.Space, act_space: spaces.Space, max_episode_steps: int) -> EnvSpec:
    """Build an ``EnvSpec`` from single-env spaces, or raise a one-line ``ConfigError`` listing what is supported."""
    common: dict[str, Any] = {"name": name, "max_episode_steps": int(max_episode_steps)}
    common.update(_obs_fields(name, obs_space))
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
    if isinstance(act_space, spaces.MultiDiscrete):
        nvec = tuple(int(n) for n in np.asarray(act_space.nvec).reshape(-1))
        return EnvSpec(discrete=False, action_shape=tuple(act_space.shape), action_nvec=nvec, **common)
    if isinstance(act_space, spaces.MultiBinary):
        return EnvSpec(discrete=False, action_shape=tuple(act_space.shape), action_binary=True, **common)
    raise ConfigError(
        f"GymnasiumEnv({name!r}): action space {act_space} is not supported; supported: {ACTIONS_SUPPORTED}"
    )


def _obs_fields(name: str, space: spaces.Space) -> dict[str, Any]:
    if isinstance(space, spaces.Dict):
        return {"obs_shape": (), "obs_keys": tuple(_dict_leaves(name, space, ()))}
    leaf = _leaf(name, space, "observation space")
    return {"obs_shape": leaf.shape, "obs_dtype": leaf.dtype, "obs_classes": leaf.classes}


def _dict_leaves(name: str, space: spaces.Dict, prefix: tuple[str, ...]) -> list[tuple[tuple[str, ...], ObsLeaf]]:
    leaves = []
    for key, sub in space.spaces.items():
        path = (*prefix, str(key))
        if isinstance(sub, spaces.Dict):
            leaves += _dict_leaves(name, sub, path)
            continue
        leaves.append((path, _leaf(name, sub, f"observation key {'/'.join(path)!r}")))
    return leaves


def _leaf(name: str, space: spaces.Space, what: str) -> ObsLeaf:
    if isinstance(space, spaces.Discrete):
        return ObsLeaf((), torch.int64, int(space.n))
    if isinstance(space, spaces.Box):
        try:
            dtype = torch.from_numpy(np.zeros(0, dtype=space.dtype)).dtype
        except TypeError:
            dtype = None
        if dtype is not None:
            return ObsLeaf(tuple(space.shape), dtype)
    raise ConfigError(f"GymnasiumEnv({name!r}): {what} {space} is not supported; supported: {OBS_SUPPORTED}")


def stack_obs(rows: list[Any], space: spaces.Space) -> Any:
    """Per-env observations (arrays, ints or dicts of them) → one batch (an array, or a dict of arrays)."""
    if isinstance(space, spaces.Dict):
        return {key: stack_obs([row[key] for row in rows], sub) for key, sub in space.spaces.items()}
    return np.stack([np.asarray(row) for row in rows])


def with_final_obs(obs: Any, final: Any, mask: np.ndarray, space: spaces.Space) -> Any:
    """A copy of the batch ``obs`` whose rows where ``mask`` is True are ``final[i]`` (Gymnasium's object array)."""
    if isinstance(space, spaces.Dict):
        return {
            key: with_final_obs(obs[key], [None if f is None else f[key] for f in final], mask, sub)
            for key, sub in space.spaces.items()
        }
    out = np.array(obs, copy=True)
    for i in np.flatnonzero(mask):
        out[i] = final[i]
    return out


def obs_tensor(obs: Any, space: spaces.Space, device: torch.device | None) -> torch.Tensor | TensorDict:
    """A batch of observations as the contract's tensor (dtype kept) or, for a ``Dict`` space, TensorDict."""
    if isinstance(space, spaces.Dict):
        leaves = {key: obs_tensor(obs[key], sub, device) for key, sub in space.spaces.items()}
        batch = next(iter(leaves.values())).shape[:1]
        return TensorDict(leaves, batch_size=batch, device=device)
    if isinstance(space, spaces.Discrete):
        return (torch.as_tensor(np.asarray(obs, dtype=np.int64)) - int(space.start)).to(device)
    return torch.as_tensor(np.ascontiguousarray(obs)).to(device)


def gym_actions(action: torch.Tensor, space: spaces.Space) -> np.ndarray:
    """A ``[B, ...]`` torch action batch in ``space``'s terms: offsets added (``start``), ``Box`` clipped."""
    batch = action.detach().cpu().numpy()
    if isinstance(space, spaces.Discrete):
        return batch.astype(np.int64) + int(space.start)
    shaped = batch.reshape(batch.shape[0], *space.shape)
    if isinstance(space, spaces.MultiDiscrete):
        return (shaped + space.start).astype(space.dtype)
    if isinstance(space, spaces.MultiBinary):
        return shaped.astype(space.dtype)
    return np.clip(shaped, space.low, space.high).astype(space.dtype)
