"""SPO's M-step, dual and critic losses (Macfarlane et al., 2024, §4.3 and App. D) as pure functions.

The policy is fitted to the SMC search target by a weighted-particle cross-entropy, kept close to the Polyak target
actor by an MPO trust region with a Lagrangian dual α (Abdolmaleki et al., 2018), and the search temperature η is
learned by minimising the sample estimate of the E-step dual ``g(η)`` (eq 7). Duals are stored as unconstrained "log"
parameters mapped through :func:`dual_value` and floored with :func:`clamp_duals_` after each update. The critic
regresses onto GAE(λ) targets computed with the target critic.

Every ``spo_*_policy_loss`` returns a TensorDict of ``loss_*`` terms (the caller sums them) plus detached diagnostics.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from tensordict import TensorDict

from rl_lightning.networks.distributions import categorical_kl, normal_kl, tanh_normal_log_prob
from rl_lightning.objectives.gae import generalized_advantage_estimate

DUAL_FLOOR = -18.0
"""Lower bound on every log-dual parameter after an update (Stoix ``clip_dual_params``)."""

_DUAL_OFFSET = 1e-8


def dual_value(log_param: torch.Tensor) -> torch.Tensor:
    """Map a log-dual parameter to its positive value, ``softplus(log_param) + 1e-8`` (so 10 means ≈ 10, not e¹⁰)."""
    return F.softplus(log_param) + _DUAL_OFFSET


def clamp_duals_(params: Iterable[torch.Tensor]) -> None:
    """Clip log-dual parameters in place from below at :data:`DUAL_FLOOR` (call after each optimiser step)."""
    with torch.no_grad():
        for param in params:
            param.clamp_min_(DUAL_FLOOR)


def temperature_loss(
    advantages: torch.Tensor, temperature: torch.Tensor, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Temperature dual: the sample estimate of ``g(η)`` (paper eq 7, Stoix ``compute_weights_and_temperature_loss``).

    ``L_η = η · [ε + mean_b logsumexp_i(A_{b,i} / η) − log N]``, so ``∂L_η/∂η = ε − KL(softmax(A/η) ‖ U_N)``: η rises
    when the non-parametric KL exceeds ``ε`` and falls otherwise. Only ``temperature`` gets a gradient.

    Shape contract: ``advantages`` ``[B, N]`` (detached here); ``temperature`` ``[]``. Returns ``(loss, kl)``, both
    ``[]``, where ``kl = mean_b Σ_i w log(N w)`` with ``w = softmax(A / sg(η))`` is a detached diagnostic.

    Args:
        advantages: search advantages of the N root particles per state.
        temperature: ``η = dual_value(log_temperature)``, carrying the gradient.
        epsilon: KL bound ``ε`` of the E-step.
    """
    advantages = advantages.detach()
    num_particles = advantages.shape[-1]
    log_normaliser = torch.logsumexp(advantages / temperature, dim=-1).mean()
    loss = temperature * (epsilon + log_normaliser - math.log(num_particles))
    with torch.no_grad():
        weights = (advantages / temperature).softmax(-1)
        kl = torch.special.xlogy(weights, weights * num_particles).sum(-1).mean()
    return loss, kl


def particle_cross_entropy(log_prob: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted-particle cross-entropy to the search target, ``−mean_b Σ_i sg(w_{b,i}) · log π(a_{b,i} | s_b)``.

    Paper eq 11 / App. D. Particles with weight 0 contribute exactly 0 even where their log-prob is ``−inf``.

    Shape contract: ``log_prob`` and ``weights`` ``[B, N]``; returns ``[]``.
    """
    weights = weights.detach()
    weighted = torch.where(weights > 0, weights * log_prob, torch.zeros_like(log_prob))
    return -weighted.sum(-1).mean()


def kl_trust_region(
    kl: torch.Tensor, alpha: torch.Tensor, epsilon: float | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MPO M-step trust region with a Lagrangian dual (Abdolmaleki et al., 2018; SPO eq 12, App. G.5).

    ``loss_kl = Σ sg(α) · mean_b KL`` pulls the actor towards the target actor; ``loss_alpha = Σ α · (ε − sg(mean_b
    KL))`` raises α when the KL exceeds ``ε`` and lowers it otherwise.

    Shape contract: ``kl`` ``[B]`` (``alpha``, ``epsilon`` scalars) or ``[B, D]`` for per-dimension constraints
    (``alpha`` and ``epsilon`` scalars or ``[D]``). Returns ``(loss_kl, loss_alpha, mean_kl)`` with the losses ``[]``
    and ``mean_kl = kl.mean(0)`` ``[]`` or ``[D]`` (still attached to the actor's graph).
    """
    mean_kl = kl.mean(0)
    loss_kl = (alpha.detach() * mean_kl).sum()
    loss_alpha = (alpha * (epsilon - mean_kl.detach())).sum()
    return loss_kl, loss_alpha, mean_kl


def spo_discrete_policy_loss(
    online_logits: torch.Tensor,
    target_logits: torch.Tensor,
    sampled_actions: torch.Tensor,
    weights: torch.Tensor,
    advantages: torch.Tensor,
    log_temperature: torch.Tensor,
    log_alpha: torch.Tensor,
    epsilon: float,
    epsilon_alpha: float,
) -> TensorDict:
    """SPO actor and dual losses for a categorical policy (paper §4.3, App. D; spo.md §1.5).

    ``L = loss_policy + loss_kl + loss_alpha + loss_temperature`` with the weighted-particle CE to the search target,
    the trust region on ``KL(π_θ̄ ‖ π_θ)`` against the target actor θ̄, and the temperature dual.

    Shape contract: ``online_logits``, ``target_logits`` ``[B, A]`` (either may be masked with the dtype's minimum;
    ``target_logits`` is detached here); ``sampled_actions`` int64 ``[B, N]``; ``weights``, ``advantages`` ``[B, N]``;
    ``log_temperature``, ``log_alpha`` ``[]``. Returns a TensorDict (batch size ``[]``) with ``loss_policy``,
    ``loss_kl``, ``loss_alpha``, ``loss_temperature`` and detached diagnostics ``kl`` (mean KL(target ‖ online)),
    ``kl_nonparametric``, ``temperature``, ``alpha`` and ``entropy`` (mean online entropy).

    Args:
        online_logits: ``π_θ`` logits.
        target_logits: ``π_θ̄`` logits of the Polyak target actor.
        sampled_actions: the N root actions of the search per state.
        weights: their normalised search weights ``w̄`` (sum to 1 over N).
        advantages: their search advantages, for the temperature dual.
        log_temperature: unconstrained temperature parameter.
        log_alpha: unconstrained KL-dual parameter.
        epsilon: E-step KL bound ``ε`` for the temperature.
        epsilon_alpha: M-step KL bound ``ε_α``.
    """
    temperature = dual_value(log_temperature)
    alpha = dual_value(log_alpha)
    log_p = online_logits.log_softmax(-1)
    loss_policy = particle_cross_entropy(log_p.gather(-1, sampled_actions.long()), weights)
    kl = categorical_kl(target_logits.detach(), online_logits)
    loss_kl, loss_alpha, mean_kl = kl_trust_region(kl, alpha, epsilon_alpha)
    loss_temperature, kl_nonparametric = temperature_loss(advantages, temperature, epsilon)
    with torch.no_grad():
        p = log_p.exp()
        entropy = -torch.where(p > 0, p * log_p, torch.zeros_like(log_p)).sum(-1).mean()
    return TensorDict(
        {
            "loss_policy": loss_policy,
            "loss_kl": loss_kl,
            "loss_alpha": loss_alpha,
            "loss_temperature": loss_temperature,
            "kl": mean_kl.detach(),
            "kl_nonparametric": kl_nonparametric,
            "temperature": temperature.detach(),
            "alpha": alpha.detach(),
            "entropy": entropy,
        },
        batch_size=[],
    )


def decoupled_cross_entropy(
    online_mean: torch.Tensor,
    online_std: torch.Tensor,
    target_mean: torch.Tensor,
    target_std: torch.Tensor,
    sampled_actions: torch.Tensor,
    weights: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
) -> torch.Tensor:
    """``CE(π_μ) + CE(π_σ)``: the particles' weighted cross-entropy under ``π_μ = tanhN(μ_θ, σ_θ̄)``, which trains only
    the mean, plus under ``π_σ = tanhN(μ_θ̄, σ_θ)``, which trains only the std (decoupled MPO, Abdolmaleki et al.,
    2018). Shapes as in :func:`spo_continuous_policy_loss`; returns ``[]``."""

    def log_prob(mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:  # [B, N]
        return tanh_normal_log_prob(mean.unsqueeze(1), std.unsqueeze(1), sampled_actions, low, high)

    return particle_cross_entropy(log_prob(online_mean, target_std), weights) + particle_cross_entropy(
        log_prob(target_mean, online_std), weights
    )


def decoupled_trust_region(
    online_mean: torch.Tensor,
    online_std: torch.Tensor,
    target_mean: torch.Tensor,
    target_std: torch.Tensor,
    alpha_mean: torch.Tensor,
    alpha_std: torch.Tensor,
    epsilon_alpha_mean: float | torch.Tensor,
    epsilon_alpha_std: float | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The trust regions of the mean and of the std, each with its own per-dimension dual (:func:`kl_trust_region`)
    on ``KL_μ = KL(N(μ_θ̄, σ_θ̄) ‖ N(μ_θ, σ_θ̄))`` and ``KL_σ = KL(N(μ_θ̄, σ_θ̄) ‖ N(μ_θ̄, σ_θ))``, the pre-tanh Normals'.

    Returns ``(loss_kl, loss_alpha, kl_mean, kl_std)``: both parts' losses summed (``[]``), and each KL's batch mean
    ``[D]`` (attached).
    """
    kl_mu = normal_kl(target_mean, target_std, online_mean, target_std)
    kl_sigma = normal_kl(target_mean, target_std, target_mean, online_std)
    loss_kl_mu, loss_alpha_mu, mean_kl_mu = kl_trust_region(kl_mu, alpha_mean, epsilon_alpha_mean)
    loss_kl_sigma, loss_alpha_sigma, mean_kl_sigma = kl_trust_region(kl_sigma, alpha_std, epsilon_alpha_std)
    return loss_kl_mu + loss_kl_sigma, loss_alpha_mu + loss_alpha_sigma, mean_kl_mu, mean_kl_sigma


def spo_continuous_policy_loss(
    online_mean: torch.Tensor,
    online_std: torch.Tensor,
    target_mean: torch.Tensor,
    target_std: torch.Tensor,
    sampled_actions: torch.Tensor,
    weights: torch.Tensor,
    advantages: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
    log_temperature: torch.Tensor,
    log_alpha_mean: torch.Tensor,
    log_alpha_std: torch.Tensor,
    epsilon: float,
    epsilon_alpha_mean: float | torch.Tensor,
    epsilon_alpha_std: float | torch.Tensor,
) -> TensorDict:
    """SPO actor and dual losses for a tanh-affine Normal policy, decoupled MPO (Abdolmaleki et al., 2018; spo.md §1.5).

    With ``π_μ = tanhN(μ_θ, σ_θ̄)``, ``π_σ = tanhN(μ_θ̄, σ_θ)`` and the batch means of the pre-tanh KLs of
    :func:`decoupled_trust_region`::

        L = CE(π_μ) + CE(π_σ) + Σ_d [sg(α_μ) KL_μ + sg(α_σ) KL_σ + α_μ (ε_μ − sg KL_μ) + α_σ (ε_σ − sg KL_σ)] + L_η

    Returns a TensorDict (batch size ``[]``) with ``loss_policy``, ``loss_kl``, ``loss_alpha``, ``loss_temperature``
    and detached diagnostics ``kl_mean``, ``kl_std`` (summed over dims, mean over batch), ``kl_nonparametric``,
    ``temperature``, ``alpha_mean``, ``alpha_std`` (means over dims). Targets and actions are detached here.

    Args:
        online_mean: pre-tanh mean ``μ_θ`` ``[B, D]``.
        online_std: pre-tanh standard deviation ``σ_θ`` ``[B, D]``.
        target_mean: ``μ_θ̄`` of the Polyak target actor ``[B, D]``.
        target_std: ``σ_θ̄`` of the Polyak target actor ``[B, D]``.
        sampled_actions: the N root actions of the search per state (in ``[low, high]``) ``[B, N, D]``.
        weights: their normalised search weights ``w̄`` ``[B, N]``.
        advantages: their search advantages, for the temperature dual ``[B, N]``.
        low: lower action bound, broadcastable to ``[D]``.
        high: upper action bound, broadcastable to ``[D]``.
        log_temperature: unconstrained temperature parameter ``[]``.
        log_alpha_mean: unconstrained per-dimension dual of the mean constraint ``[D]``.
        log_alpha_std: unconstrained per-dimension dual of the std constraint ``[D]``.
        epsilon: E-step KL bound ``ε`` for the temperature.
        epsilon_alpha_mean: M-step KL bound ``ε_μ`` per dimension (a float or ``[D]``).
        epsilon_alpha_std: M-step KL bound ``ε_σ`` per dimension (a float or ``[D]``).
    """
    target_mean, target_std, sampled_actions = target_mean.detach(), target_std.detach(), sampled_actions.detach()
    temperature = dual_value(log_temperature)
    alpha_mean, alpha_std = dual_value(log_alpha_mean), dual_value(log_alpha_std)
    loss_policy = decoupled_cross_entropy(
        online_mean, online_std, target_mean, target_std, sampled_actions, weights, low, high
    )
    loss_kl, loss_alpha, mean_kl_mu, mean_kl_sigma = decoupled_trust_region(
        online_mean, online_std, target_mean, target_std, alpha_mean, alpha_std, epsilon_alpha_mean, epsilon_alpha_std
    )
    loss_temperature, kl_nonparametric = temperature_loss(advantages, temperature, epsilon)
    return TensorDict(
        {
            "loss_policy": loss_policy,
            "loss_kl": loss_kl,
            "loss_alpha": loss_alpha,
            "loss_temperature": loss_temperature,
            "kl_mean": mean_kl_mu.detach().sum(),
            "kl_std": mean_kl_sigma.detach().sum(),
            "kl_nonparametric": kl_nonparametric,
            "temperature": temperature.detach(),
            "alpha_mean": alpha_mean.detach().mean(),
            "alpha_std": alpha_std.detach().mean(),
        },
        batch_size=[],
    )


def critic_loss(value: torch.Tensor, target: torch.Tensor, vf_coef: float) -> torch.Tensor:
    """``vf_coef · mean ½ (V_φ(s_t) − sg(y_t))²`` (spo.md §1.5; Alg. 2 l.21).

    Shape contract: ``value`` and ``target`` ``[T, B]`` (or any equal shapes); returns ``[]``.
    """
    return vf_coef * (0.5 * (value - target.detach()).pow(2)).mean()


def critic_targets(
    reward: torch.Tensor,
    target_value: torch.Tensor,
    target_next_value: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """GAE(λ) return targets ``y_t = Â_t + V_φ'(s_t)`` computed with the target critic φ' (paper §4.2.1, Alg. 2 l.21).

    Shape contract: every input ``[T, B]``; returns ``[T, B]``, detached. ``target_next_value[t]`` is ``V_φ'`` of the
    true successor (``final_obs``, before any auto-reset), so truncation bootstraps from it; the λ-recursion stops at
    termination, truncation and the end of the sequence (see
    :func:`~rl_lightning.objectives.gae.generalized_advantage_estimate`).

    Args:
        reward: ``r_t``.
        target_value: ``V_φ'(s_t)``.
        target_next_value: ``V_φ'(s'_t)``.
        terminated: bool, absorbing end after step ``t``.
        truncated: bool, time-limit cut after step ``t``.
        gamma: discount.
        lam: GAE λ.
    """
    advantage, _ = generalized_advantage_estimate(
        reward, target_value, target_next_value, terminated, truncated, gamma, lam
    )
    return (advantage + target_value).detach()
