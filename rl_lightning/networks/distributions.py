"""Action distributions that sample from an explicit ``torch.Generator`` (torch.distributions cannot).

Each function works on batched parameters; nothing here syncs with the host.
"""

from __future__ import annotations

import math

import torch

_LOG_2PI = math.log(2.0 * math.pi)


def masked_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Replace illegal actions' logits by the dtype's minimum so they get probability 0 (exactly, after softmax)."""
    if mask is None:
        return logits
    return logits.masked_fill(~mask, torch.finfo(logits.dtype).min)


def categorical_sample(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Gumbel-max sample over the last dim; masked logits (dtype min) are never chosen."""
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    gumbel = -torch.log(-torch.log(uniform.clamp_min(torch.finfo(logits.dtype).tiny)))
    return (logits + gumbel).argmax(-1)


def categorical_log_prob(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    return logits.log_softmax(-1).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    log_p = logits.log_softmax(-1)
    return -(log_p.exp() * log_p).sum(-1)


def normal_sample(mean: torch.Tensor, log_std: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
    return mean + log_std.exp() * noise


def normal_log_prob(mean: torch.Tensor, log_std: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Diagonal Gaussian log-density, summed over the action dims."""
    z = (action - mean) * (-log_std).exp()
    return (-0.5 * z.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)


def normal_entropy(log_std: torch.Tensor) -> torch.Tensor:
    return (log_std + 0.5 * (1.0 + _LOG_2PI)).sum(-1)
