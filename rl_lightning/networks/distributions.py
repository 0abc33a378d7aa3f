"""Action distributions that sample from an explicit ``torch.Generator`` (torch.distributions cannot).

Each function works on batched parameters; nothing here syncs with the host.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

_LOG_2PI = math.log(2.0 * math.pi)


def masked_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Replace illegal actions' logits by the dtype's minimum so they get probability 0 (exactly, after softmax)."""
    if mask is None:
        return logits
    return logits.masked_fill(~mask, torch.finfo(logits.dtype).min)


def categorical_sample(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Gumbel-max sample over the last dim; masked logits (dtype min) are never chosen."""
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    return categorical_from_uniform(logits, uniform)


def categorical_from_uniform(logits: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """``categorical_sample`` given its ``U[0, 1)`` draws (same shape as ``logits``): pure, so it compiles."""
    gumbel = -torch.log(-torch.log(uniform.clamp_min(torch.finfo(logits.dtype).tiny)))
    return (logits + gumbel).argmax(-1)


def categorical_log_prob(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    return logits.log_softmax(-1).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    log_p = logits.log_softmax(-1)
    return -(log_p.exp() * log_p).sum(-1)


def normal_sample(mean: torch.Tensor, log_std: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
    return normal_from_noise(mean, log_std, noise)


def normal_from_noise(mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """``normal_sample`` given its standard-normal draws (same shape as ``mean``): pure, so it compiles."""
    return mean + log_std.exp() * noise


def normal_log_prob(mean: torch.Tensor, log_std: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Diagonal Gaussian log-density, summed over the action dims."""
    z = (action - mean) * (-log_std).exp()
    return (-0.5 * z.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)


def normal_entropy(log_std: torch.Tensor) -> torch.Tensor:
    return (log_std + 0.5 * (1.0 + _LOG_2PI)).sum(-1)


# Independent categoricals (``MultiDiscrete``) over logits ``[..., sum(nvec)]`` split per dimension, and independent
# Bernoullis (``MultiBinary``) over logits ``[..., D]``; actions ``[..., D]`` int64, log-probs and entropies summed.


def multi_categorical_sample(
    logits: torch.Tensor, nvec: tuple[int, ...], generator: torch.Generator | None, deterministic: bool = False
) -> torch.Tensor:
    """One class per dimension (Gumbel-max, or argmax when ``deterministic``): ``[..., D]`` int64."""
    parts = logits.split(list(nvec), dim=-1)
    picks = [p.argmax(-1) if deterministic else categorical_sample(p, generator) for p in parts]
    return torch.stack(picks, dim=-1)


def multi_categorical_log_prob(logits: torch.Tensor, nvec: tuple[int, ...], action: torch.Tensor) -> torch.Tensor:
    parts = logits.split(list(nvec), dim=-1)
    return sum(categorical_log_prob(p, action[..., i]) for i, p in enumerate(parts))


def multi_categorical_entropy(logits: torch.Tensor, nvec: tuple[int, ...]) -> torch.Tensor:
    return sum(categorical_entropy(p) for p in logits.split(list(nvec), dim=-1))


def bernoulli_sample(
    logits: torch.Tensor, generator: torch.Generator | None, deterministic: bool = False
) -> torch.Tensor:
    """``1`` with probability ``sigmoid(logit)`` per dimension (``logit > 0`` when ``deterministic``): int64."""
    if deterministic:
        return (logits > 0).long()
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    return (uniform < torch.sigmoid(logits)).long()


def bernoulli_log_prob(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    a = action.to(logits.dtype)
    return (a * F.logsigmoid(logits) + (1.0 - a) * F.logsigmoid(-logits)).sum(-1)


def bernoulli_entropy(logits: torch.Tensor) -> torch.Tensor:
    p = torch.sigmoid(logits)
    return -(p * F.logsigmoid(logits) + (1.0 - p) * F.logsigmoid(-logits)).sum(-1)


# Tanh-squashed, affinely rescaled Normal (Stoix ``NormalAffineTanhDistributionHead``), used by SPO for continuous
# actions: u ~ N(mean, std), action = low + (tanh(u) + 1) / 2 · (high − low).

_TANH_CLIP = 1.0 - 1e-6
_LOG_2 = math.log(2.0)


def tanh_normal_sample(
    mean: torch.Tensor,
    std: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """Sample ``low + (tanh(mean + std · ε) + 1) / 2 · (high − low)`` with ``ε ~ N(0, I)`` from ``generator``.

    Shape contract: ``mean``, ``std`` ``[..., D]``; ``low``, ``high`` broadcastable to them; returns ``[..., D]``
    inside ``[low, high]`` (the bounds themselves can be reached when tanh saturates in floating point).
    """
    noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
    return tanh_normal_from_noise(mean, std, low, high, noise)


def tanh_normal_from_noise(
    mean: torch.Tensor, std: torch.Tensor, low: torch.Tensor, high: torch.Tensor, noise: torch.Tensor
) -> torch.Tensor:
    """``tanh_normal_sample`` given its ``N(0, I)`` draws ``noise`` (shape of ``mean``): pure, so it compiles."""
    return low + (torch.tanh(mean + std * noise) + 1.0) * 0.5 * (high - low)


def tanh_normal_log_prob(
    mean: torch.Tensor,
    std: torch.Tensor,
    action: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
) -> torch.Tensor:
    """Log-density of the tanh-affine Normal, summed over the action dim; finite at the bounds.

    Shape contract: ``mean``, ``std``, ``action`` broadcastable to ``[..., D]``; ``low``, ``high`` broadcastable to
    ``[..., D]``; returns ``[...]``.

    The action is mapped back to ``y ∈ (−1, 1)``, clipped to ``±(1 − 1e-6)`` so that the exact bounds stay finite, and
    ``u = atanh(y)``; then ``log p(a) = log N(u; mean, std) − Σ_d log((high − low) / 2 · (1 − tanh(u)²))`` with
    ``log(1 − tanh(u)²) = 2 (log 2 − u − softplus(−2u))`` for numerical stability.
    """
    half_range = (high - low) * 0.5
    y = ((action - low) / half_range - 1.0).clamp(-_TANH_CLIP, _TANH_CLIP)
    u = torch.atanh(y)
    z = (u - mean) / std
    log_normal = -0.5 * z.pow(2) - std.log() - 0.5 * _LOG_2PI
    log_det = half_range.log() + 2.0 * (_LOG_2 - u - torch.nn.functional.softplus(-2.0 * u))
    return (log_normal - log_det).sum(-1)


def tanh_normal_mode(mean: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """The squashed pre-tanh mean ``low + (tanh(mean) + 1) / 2 · (high − low)`` (the deterministic action)."""
    return low + (torch.tanh(mean) + 1.0) * 0.5 * (high - low)


def normal_kl(mean_p: torch.Tensor, std_p: torch.Tensor, mean_q: torch.Tensor, std_q: torch.Tensor) -> torch.Tensor:
    """Per-dimension ``KL(N(mean_p, std_p²) ‖ N(mean_q, std_q²))``, not summed (shape of the broadcast inputs)."""
    var_ratio = (std_p / std_q).pow(2)
    mean_term = ((mean_p - mean_q) / std_q).pow(2)
    return 0.5 * (var_ratio + mean_term - 1.0 - var_ratio.log())


def categorical_kl(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """``KL(p ‖ q)`` over the last dim, from logits; safe with masked logits.

    Entries where ``p`` is 0 (e.g. logits filled with the dtype's minimum by :func:`masked_logits`) contribute exactly
    0, with a finite gradient. ``q`` must give positive probability wherever ``p`` does.

    Shape contract: ``[..., A]`` each; returns ``[...]``.
    """
    log_p = logits_p.log_softmax(-1)
    log_q = logits_q.log_softmax(-1)
    p = log_p.exp()
    # Mask the log-difference itself (not only the product) so that 0 · (−inf) never reaches autograd.
    log_ratio = torch.where(p > 0, log_p - log_q, torch.zeros_like(log_p))
    return (p * log_ratio).sum(-1)


# ----- DreamerV3 transforms and latent distributions (dreamer.md §2, §4) ------------------------------------------


def one_hot(index: torch.Tensor, classes: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``F.one_hot`` without its host sync (it reads the max index back to validate it): a broadcast compare."""
    return (index.unsqueeze(-1) == torch.arange(classes, device=index.device)).to(dtype)


def symlog(x: torch.Tensor) -> torch.Tensor:
    """sign(x)·log(1 + |x|): compresses large magnitudes, identity near 0 (Hafner et al. 2023, eq. 9)."""
    return torch.sign(x) * torch.log1p(x.abs())


def symexp(x: torch.Tensor) -> torch.Tensor:
    """sign(x)·(exp(|x|) − 1), the inverse of ``symlog``."""
    return torch.sign(x) * torch.expm1(x.abs())


def unimix_logits(logits: torch.Tensor, unimix: float) -> torch.Tensor:
    """Log-probabilities of ``(1 − unimix)·softmax(logits) + unimix/K`` over the last dim (K classes).

    Every probability is at least ``unimix/K``, so KLs and log-probs stay finite however peaked the logits get.
    """
    if unimix <= 0.0:
        return logits.log_softmax(-1)
    probs = logits.softmax(-1)
    mixed = (1.0 - unimix) * probs + unimix / logits.shape[-1]
    return mixed.log()


def onehot_straight_through(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """A one-hot sample of ``softmax(logits)`` whose gradient is that of the probabilities (straight-through).

    The forward value is an exact one-hot (Gumbel-max over the last dim, from ``generator``); backward treats the
    sample as ``probs`` (Bengio et al. 2013), as DreamerV3's latents and discrete actions do.
    """
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    return onehot_straight_through_from_uniform(logits, uniform)


def onehot_straight_through_from_uniform(logits: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """``onehot_straight_through`` given its ``U[0, 1)`` draws (shape of ``logits``): pure, so it compiles."""
    index = categorical_from_uniform(logits.detach(), uniform)
    sample = one_hot(index, logits.shape[-1], logits.dtype)
    probs = logits.softmax(-1)
    return sample + probs - probs.detach()


def onehot_mode(logits: torch.Tensor) -> torch.Tensor:
    """The most likely class as a one-hot (evaluation); straight-through like ``onehot_straight_through``."""
    sample = one_hot(logits.argmax(-1), logits.shape[-1], logits.dtype)
    probs = logits.softmax(-1)
    return sample + probs - probs.detach()
