"""Raw Gymnasium observations in, actions in the env's own space out: the conversions of inference.

Both directions live here so a new space kind is a change to this file only:

* ``obs_batch`` turns what a Gymnasium env returns (numpy or torch, one observation or a batch) into the
  ``[B]`` TensorDict a module's ``act`` reads, with the dtype the checkpoint's env delivered in training.
* ``env_actions`` turns the module's actions (what ``BatchedEnv.step`` takes) into the action space's terms with
  ``gym_actions``, the very function every Gymnasium backend calls before ``env.step`` (``Discrete`` offset by
  ``start``, ``Box`` clipped to its bounds and cast to its dtype).
* ``action_space_from_spec`` rebuilds the action space from the checkpoint's ``EnvSpec`` (no env needed);
  ``check_action_space`` checks a space the user passes against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import EnvSpec
from rl_lightning.envs.gymnasium.spaces import gym_actions
from rl_lightning.errors import ConfigError


def obs_batch(obs: Any, spec: EnvSpec, device: torch.device, action_mask: Any = None) -> tuple[TensorDict, bool]:
    """``(TensorDict[B] with obs (+ action_mask), single)``; ``single`` when ``obs`` is one observation.

    A ``Dict`` observation is a (nested) dict of arrays, one per key of the checkpoint's env; each key may be one
    observation or a batch, the same for all keys.

    Raises:
        ConfigError: a dict where an array is expected (or the reverse), a missing key, or a shape that is neither
            the key's shape nor ``(B, *shape)``.
    """
    tensors = _leaf_tensors(obs, spec, device)
    singles = {name: _is_single(tensors[key], leaf.shape, name, spec) for (key, leaf), name in _named_leaves(spec)}
    if len(set(singles.values())) > 1:
        raise ConfigError(f"observation keys mix one observation and a batch ({singles}); pass all keys alike")
    single = next(iter(singles.values()))
    if single:
        tensors = {key: tensor.unsqueeze(0) for key, tensor in tensors.items()}
    batch = next(iter(tensors.values())).shape[:1]
    td = TensorDict({}, batch_size=batch, device=device)
    for key, tensor in tensors.items():
        td.set((keys.OBS, *key) if key else keys.OBS, tensor)
    if action_mask is not None:
        td[keys.ACTION_MASK] = _mask(action_mask, spec, batch[0], single, device)
    elif spec.has_action_mask:
        raise ConfigError(
            f"the checkpoint's env {spec.name!r} has action masks and the policy was trained with them; pass "
            f"action_mask= (bool, shape ({spec.num_actions},) or (B, {spec.num_actions}); True = legal)"
        )
    return td, single


def _named_leaves(spec: EnvSpec) -> list[tuple[tuple[tuple[str, ...], Any], str]]:
    return [((key, leaf), "/".join(key) or "obs") for key, leaf in spec.obs_leaves()]


def _leaf_tensors(obs: Any, spec: EnvSpec, device: torch.device) -> dict[tuple[str, ...], torch.Tensor]:
    """One tensor per observation leaf of ``spec``, in the leaf's stored dtype."""
    is_dict = isinstance(obs, Mapping | TensorDict)
    if not spec.obs_keys:
        if is_dict:
            raise ConfigError(
                f"observation is a dict (keys {sorted(obs.keys())}), but the checkpoint's env {spec.name!r} has a "
                f"single observation array of shape {tuple(spec.obs_shape)}; pass that array"
            )
        return {(): _as_tensor(obs, device, spec.obs_dtype)}
    names = [name for _, name in _named_leaves(spec)]
    if not is_dict:
        raise ConfigError(f"the checkpoint's env {spec.name!r} has Dict observations (keys {names}); pass a dict")
    tensors = {}
    for (key, leaf), name in _named_leaves(spec):
        value = obs
        for part in key:
            if part not in value:
                raise ConfigError(f"observation has no key {name!r}; the checkpoint's env {spec.name!r} has {names}")
            value = value[part]
        tensors[key] = _as_tensor(value, device, leaf.dtype)
    return tensors


def _is_single(tensor: torch.Tensor, shape: tuple[int, ...], name: str, spec: EnvSpec) -> bool:
    shape = tuple(shape)
    if tuple(tensor.shape) == shape:
        return True
    if tuple(tensor.shape[1:]) != shape:
        raise ConfigError(
            f"observation {name!r} of shape {tuple(tensor.shape)} does not fit the checkpoint's env {spec.name!r}: "
            f"pass one observation of shape {shape} or a batch of shape (B, {', '.join(map(str, shape))})"
        )
    return False


def _as_tensor(value: Any, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=dtype)
    return torch.as_tensor(np.asarray(value)).to(device=device, dtype=dtype)


def _mask(mask: Any, spec: EnvSpec, batch: int, single: bool, device: torch.device) -> torch.Tensor:
    if not spec.discrete:
        raise ConfigError(f"action_mask is for Discrete actions; the checkpoint's env {spec.name!r} has a Box")
    tensor = _as_tensor(mask, device, torch.bool)
    expected = (spec.num_actions,) if single else (batch, spec.num_actions)
    if tuple(tensor.shape) != expected:
        raise ConfigError(f"action_mask of shape {tuple(tensor.shape)} does not fit the observation: use {expected}")
    return tensor.unsqueeze(0) if single else tensor


def env_actions(action: torch.Tensor, space: spaces.Space, single: bool, obs: Any) -> Any:
    """The module's ``[B, ...]`` actions in ``space``'s terms, shaped and typed like the input observation was.

    numpy (or any non-tensor) observations get numpy actions; tensor observations get tensors on their device.
    One observation gets one action: a Python ``int`` for ``Discrete`` (a 0-dim tensor for tensor input).
    """
    batch = gym_actions(action, space)
    if isinstance(obs, torch.Tensor):
        out = torch.as_tensor(batch, device=obs.device)
        return out[0] if single else out
    if not single:
        return batch
    return int(batch[0]) if isinstance(space, spaces.Discrete) else batch[0]


def action_space_from_spec(spec: EnvSpec) -> spaces.Space:
    """The action space as far as the checkpoint's ``EnvSpec`` records it.

    ``EnvSpec`` keeps ``n``, the Box shape and bounds, a ``MultiDiscrete``'s ``nvec`` and a ``MultiBinary``'s shape,
    not a ``start`` nor a dtype: this gives ``Discrete(n)`` and ``MultiDiscrete(nvec)`` (start 0), a float32 ``Box``
    and an int8 ``MultiBinary``. An env with another start or dtype must pass its own space.
    """
    kind = spec.action_kind
    if kind == "discrete":
        return spaces.Discrete(spec.num_actions)
    if kind == "multi_discrete":
        return spaces.MultiDiscrete(np.asarray(spec.action_nvec, dtype=np.int64).reshape(spec.action_shape))
    if kind == "multi_binary":
        return spaces.MultiBinary(list(spec.action_shape))
    low = np.asarray(spec.action_low, dtype=np.float32).reshape(spec.action_shape)
    high = np.asarray(spec.action_high, dtype=np.float32).reshape(spec.action_shape)
    return spaces.Box(low, high, dtype=np.float32)


def check_action_space(space: spaces.Space, spec: EnvSpec) -> None:
    """Raise ``ConfigError`` unless ``space`` is the action space the checkpoint's policy was trained for."""
    rebuilt = action_space_from_spec(spec)
    if not _same_space(space, rebuilt, spec):
        raise ConfigError(
            f"action_space={space} does not match the checkpoint's env {spec.name!r}, trained for {rebuilt}; pass "
            "the action space of the env the checkpoint was trained on"
        )


def _same_space(space: spaces.Space, rebuilt: spaces.Space, spec: EnvSpec) -> bool:
    """Same kind, shape and ``n``/``nvec``/bounds (a ``start`` and the dtype may differ)."""
    if type(space) is not type(rebuilt):
        return False
    if isinstance(rebuilt, spaces.Discrete):
        return int(space.n) == spec.num_actions
    if tuple(space.shape) != tuple(spec.action_shape):
        return False
    if isinstance(rebuilt, spaces.MultiDiscrete):
        return np.array_equal(np.asarray(space.nvec).reshape(-1), np.asarray(spec.action_nvec))
    if isinstance(rebuilt, spaces.MultiBinary):
        return True
    return np.array_equal(
        np.asarray(space.low, dtype=np.float64).reshape(-1), np.asarray(spec.action_low)
    ) and np.array_equal(np.asarray(space.high, dtype=np.float64).reshape(-1), np.asarray(spec.action_high))
