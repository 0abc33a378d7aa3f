"""The fused rollout step (docs/guides/speed.md): act, sample, step the env with autoreset, write the row, sum episodes.

One function per tick over fixed-shape tensors, run eagerly or under ``torch.compile(fullgraph=True)``. A
``torch.Generator`` cannot enter a compiled graph, so the tick's randomness comes in as tensors drawn before the
rollout: the module's ``act_noise`` and the env's ``step_noise``, each ``[T, B, ...]``, indexed by the tick
counter inside. The algorithm and the env never see each other: the module exposes ``act_from_noise``, the env
``step_from_noise``, and this file joins them.

The carry (what one tick hands the next, updated in place) is a dict::

    view     {obs, [action_mask], is_first}   what the policy sees, [B, ...]
    state    {name: tensor}                   the env's state TensorDict, flat, [B, ...]
    episode_return, episode_length            sums over each env's open episode, float32 [B]
    tick                                      int64 [1], the row the next tick writes

and the store is a dict of ``[T, B, ...]`` tensors, one per rollout key (``tick_outputs`` gives their rows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import TorchEnv
from rl_lightning.envs.noise_step import NoiseSteppedEnv
from rl_lightning.errors import ConfigError

Carry = dict[str, Any]
Tensors = dict[str, torch.Tensor]
#: Store keys holding the open-episode sums after each step (read into episode statistics, then dropped).
RETURN_SUM = "_episode_return"
LENGTH_SUM = "_episode_length"
#: Inductor settings for CPU steps (figures in benchmarks/NOTES.md). The exp-based tanh runs about 3x faster than
#: the Sleef tanh inductor emits by default (results differ by ~1e-7), and the C++ wrapper removes much of the
#: per-call Python cost that dominates with few envs.
CPU_OPTIONS = {"cpp.use_decompose_tanh": True, "cpp_wrapper": True}
_STEP_KEYS = (keys.REWARD, keys.TERMINATED, keys.TRUNCATED, keys.FINAL_OBS)


def tick_outputs(
    module: Any, env: NoiseSteppedEnv, carry: Carry, act_noise: torch.Tensor, env_noise: torch.Tensor
) -> tuple[Tensors, Tensors, Tensors, torch.Tensor, torch.Tensor]:
    """One tick as a pure function: ``(row, next_view, next_state, next_return, next_length)``.

    ``row`` is what the store keeps for this tick: the view the policy saw, its outputs, the env's step outputs and
    the open-episode sums including this step. ``act_noise``/``env_noise`` are this tick's draws (``[B, ...]``).
    """
    view = carry["view"]
    batch = view[keys.IS_FIRST].shape[:1]
    acted = module.act_from_noise(TensorDict(dict(view), batch_size=batch), act_noise)
    state = TensorDict(dict(carry["state"]), batch_size=batch)
    next_state, out = env.step_from_noise(state, acted[keys.ACTION], env_noise)
    done = out[keys.TERMINATED] | out[keys.TRUNCATED]
    episode_return = carry["episode_return"] + out[keys.REWARD]
    episode_length = carry["episode_length"] + 1
    row = {**view, **dict(acted.items()), **{key: out[key] for key in _STEP_KEYS}}
    row[RETURN_SUM], row[LENGTH_SUM] = episode_return, episode_length
    next_view = {key: out[key] for key in view}
    next_state = {key: next_state[key] for key in carry["state"]}
    return row, next_view, next_state, episode_return.masked_fill(done, 0.0), episode_length.masked_fill(done, 0.0)


def fused_step(
    module: Any,
    env: NoiseSteppedEnv,
    carry: Carry,
    store: Tensors,
    act_noise: torch.Tensor,
    env_noise: torch.Tensor,
) -> None:
    """Advance ``carry`` one tick in place and write row ``carry["tick"]`` of ``store``.

    ``act_noise``/``env_noise`` are the whole rollout's draws (``[T, B, ...]``); the tick picks its row. Every
    argument keeps its shape from call to call and nothing reads a value back to the host, so the compiled form
    is one graph that never recompiles during a run.
    """
    tick = carry["tick"]  # a one-element tensor: indexing with it is a gather, not a data-dependent slice
    row, view, state, episode_return, episode_length = tick_outputs(
        module, env, carry, act_noise.index_select(0, tick)[0], env_noise.index_select(0, tick)[0]
    )
    for key, value in row.items():
        store[key].index_copy_(0, tick, value.unsqueeze(0))
    for key, value in view.items():
        carry["view"][key].copy_(value)
    for key, value in state.items():
        carry["state"][key].copy_(value)
    carry["episode_return"].copy_(episode_return)
    carry["episode_length"].copy_(episode_length)
    tick.add_(1)


def compile_step(step: Callable[..., None], device: torch.device) -> Callable[..., None]:
    """``step`` under ``torch.compile``: one graph (``fullgraph``), fixed shapes, ``CPU_OPTIONS`` on CPU."""
    options = CPU_OPTIONS if device.type == "cpu" else None
    return torch.compile(step, fullgraph=True, dynamic=False, options=options)


def require_fusable(module: Any, env: TorchEnv, check_env: bool = False, field: str = "data.compile") -> None:
    """Refuse, in one line naming what can, a module/env pair the fused step cannot run (before any env is built)."""
    name = type(env).__name__
    if not isinstance(env, NoiseSteppedEnv):
        raise ConfigError(
            f"{field}=true needs a torch-native env that steps from pre-drawn noise (CartPole, Pendulum, Catch); "
            f"{name} steps outside a compiled graph: set {field}=false"
        )
    if type(env).step_state is not NoiseSteppedEnv.step_state:
        raise ConfigError(
            f"{field}=true: {name} overrides step_state, which the fused step bypasses (it calls step_from_noise); "
            f"put the change in step_from_noise or set {field}=false"
        )
    if env.spec.obs_keys:
        raise ConfigError(
            f"{field}=true supports single-array observations; {name} has Dict observations: set {field}=false"
        )
    if not getattr(module, "acts_from_noise", False):
        kind = getattr(module, "env_spec", env.spec).action_kind
        raise ConfigError(
            f"{field}=true needs an algorithm that acts from pre-drawn noise (PPO with Discrete or Box actions); "
            f"{type(module).__name__} on {kind} actions has none: set {field}=false"
        )
    if check_env:
        raise ConfigError(
            f"{field}=true cannot validate actions (data.check_env=true reads every action back to the host); "
            "turn one of them off"
        )
