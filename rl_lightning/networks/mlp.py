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
    float32: bool = False,
) -> nn.Sequential:
    """``Linear → act`` per hidden size, then a linear head; orthogonal weights (gain √2, head ``output_gain``) and
    zero biases, or PyTorch's default ``Linear`` init with ``orthogonal=False``. ``float32``: a ``Float32Head``."""
    if activation not in ACTIVATIONS:
        raise ConfigError(f"activation={activation!r}: choose one of {sorted(ACTIVATIONS)}")
    layers: list[nn.Module] = []
    width = in_features
    for size in hidden_sizes:
        layers += [_init(nn.Linear(width, size), math.sqrt(2.0), orthogonal), ACTIVATIONS[activation]()]
        width = size
    layers.append(_init(nn.Linear(width, out_features), output_gain, orthogonal))
    return (Float32Head if float32 else nn.Sequential)(*layers)


class Float32Head(nn.Sequential):
    """An MLP head that computes in float32 also inside a low-precision autocast region (``trainer.precision:
    bf16-mixed``): its input is cast up and autocast is off for its layers, so the log-probs a PPO ratio divides and
    the values GAE sums keep float32 precision while the encoder before it (a CNN) runs in bfloat16. The heads are a
    small share of the FLOPs. Outside autocast it is a plain ``nn.Sequential`` (same parameters, same state dict)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device = x.device.type
        if not torch.is_autocast_enabled(device):
            return super().forward(x)
        with torch.autocast(device, enabled=False):
            return super().forward(x.float())


def _init(layer: nn.Linear, gain: float, orthogonal: bool = True) -> nn.Linear:
    if orthogonal:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer


def flat_size(shape: Sequence[int]) -> int:
    return int(torch.Size(shape).numel())
