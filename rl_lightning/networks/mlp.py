"""MLP builder with orthogonal initialisation (the PPO implementation detail of Engstrom et al., 2020)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from rl_lightning.errors import ConfigError

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


def mlp(
    in_features: int,
    out_features: int,
    hidden_sizes: Sequence[int],
    activation: str = "tanh",
    output_gain: float = 1.0,
    orthogonal: bool = True,
) -> nn.Sequential:
    """``Linear → act`` per hidden size, then a linear head; orthogonal weights (gain √2, head ``output_gain``) and
    zero biases, or PyTorch's default ``Linear`` init with ``orthogonal=False``."""
    if activation not in ACTIVATIONS:
        raise ConfigError(f"activation={activation!r}: choose one of {sorted(ACTIVATIONS)}")
    layers: list[nn.Module] = []
    width = in_features
    for size in hidden_sizes:
        layers += [_init(nn.Linear(width, size), math.sqrt(2.0), orthogonal), ACTIVATIONS[activation]()]
        width = size
    layers.append(_init(nn.Linear(width, out_features), output_gain, orthogonal))
    return nn.Sequential(*layers)


def _init(layer: nn.Linear, gain: float, orthogonal: bool = True) -> nn.Linear:
    if orthogonal:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer


def flat_size(shape: Sequence[int]) -> int:
    return int(torch.Size(shape).numel())
