"""A uniform-random action per env row, sampled from the env's action space: the random baseline of evaluations,
DreamerV3's prefill, and the actions of tests and benchmarks that need any legal action."""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import EnvSpec, data_device


def random_action(spec: EnvSpec, obs: TensorDict, generator: torch.Generator) -> torch.Tensor:
    """A uniform-random action per row, sampled from the env's action space with ``generator`` (seeded).

    ``Discrete``: uniform over the legal actions (``action_mask``); ``MultiDiscrete``: uniform per dimension;
    ``MultiBinary``: fair coins; ``Box``: as Gymnasium's ``Box.sample``: uniform where both bounds are finite,
    standard normal where neither is (e.g. under ``ClipAction``), an exponential from the finite bound otherwise.
    """
    batch = obs.batch_size[0]
    device = data_device(obs)
    kind = spec.action_kind
    if kind == "discrete":
        noise = torch.rand(batch, spec.num_actions, generator=generator, device=device)
        mask = obs.get(keys.ACTION_MASK, None)
        if mask is not None:
            noise = noise.masked_fill(~mask, -1.0)
        return noise.argmax(-1)
    shape = (batch, *spec.action_shape)
    if kind == "multi_binary":
        return torch.randint(0, 2, shape, generator=generator, device=device)
    if kind == "multi_discrete":
        nvec = torch.tensor(spec.action_nvec, device=device).reshape(spec.action_shape)
        u = torch.rand(shape, generator=generator, device=device)
        return torch.minimum((u * nvec).long(), nvec - 1)
    return _box_sample(spec, shape, generator, device)


def _box_sample(
    spec: EnvSpec, shape: tuple[int, ...], generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    low = torch.tensor(spec.action_low, device=device).reshape(spec.action_shape)
    high = torch.tensor(spec.action_high, device=device).reshape(spec.action_shape)
    u = torch.rand(shape, generator=generator, device=device)
    if all(math.isfinite(bound) for bound in (*spec.action_low, *spec.action_high)):
        return low + (high - low) * u
    bounded_low, bounded_high = torch.isfinite(low), torch.isfinite(high)
    normal = torch.randn(shape, generator=generator, device=device)
    exponential = -torch.log1p(-u)  # Exp(1) from the same uniform draw
    sample = torch.where(bounded_low & bounded_high, low + (high - low) * u, normal)
    sample = torch.where(bounded_low & ~bounded_high, low + exponential, sample)
    return torch.where(~bounded_low & bounded_high, high - exponential, sample)
