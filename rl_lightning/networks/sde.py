"""Generalized state-dependent exploration (gSDE; Raffin et al., 2022, "Smooth Exploration for Robotic Reinforcement
Learning", CoRL 2021, §3 eq. 4-5), the form Stable-Baselines3's ``StateDependentNoiseDistribution`` implements with
``full_std=True``, ``use_expln=False``, ``learn_features=False``.

The action is ``a = μ(s) + ε(s)`` with ``ε(s) = z(s) · θ``: ``z(s)`` ``[L]`` are the policy's last hidden features and
``θ`` ``[L, A]`` an exploration matrix drawn from ``N(0, σ²)`` (``σ = exp(log_std)``, a learned ``[L, A]`` parameter)
and held for many steps (a whole rollout), so the noise is a smooth function of the state rather than fresh each step.
Given ``z``, the action is Gaussian with per-row variance ``Σ_l z_l² σ_la²`` (+ ``eps``); PPO's ratio and entropy use
that Gaussian, with ``z`` detached (SB3's ``learn_features=False``: only ``σ`` learns from the variance).
"""

from __future__ import annotations

import torch

#: SB3's ``StateDependentNoiseDistribution.epsilon``: keeps the std positive where the features are all ~0.
SDE_EPS = 1e-6


def sde_log_std(latent: torch.Tensor, log_std: torch.Tensor, eps: float = SDE_EPS) -> torch.Tensor:
    """Per-row log-std ``[N, A]`` of the action given features ``latent`` ``[N, L]`` and ``log_std`` ``[L, A]``:
    ``0.5 · log(z.detach()² @ exp(log_std)² + eps)``."""
    variance = latent.detach().pow(2) @ (2.0 * log_std).exp()
    return 0.5 * (variance + eps).log()


def sde_matrices(log_std: torch.Tensor, num: int, generator: torch.Generator | None) -> torch.Tensor:
    """``num`` exploration matrices ``[num, L, A]``, each entry ``~ N(0, exp(log_std)²)`` (one per env row)."""
    noise = torch.randn((num, *log_std.shape), generator=generator, device=log_std.device, dtype=log_std.dtype)
    return noise * log_std.exp()


def sde_noise(latent: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
    """The exploration noise ``[N, A]`` of rows ``latent`` ``[N, L]``, row ``i`` with its own matrix ``[N, L, A]``."""
    return torch.bmm(latent.unsqueeze(1), matrices).squeeze(1)
