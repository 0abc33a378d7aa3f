"""PPO's clipped surrogate objective (Schulman et al., 2017, eq. 7 and 9) as a pure function."""

from __future__ import annotations

import torch


def ppo_loss(
    new_logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantage: torch.Tensor,
    new_value: torch.Tensor,
    old_value: torch.Tensor,
    value_target: torch.Tensor,
    entropy: torch.Tensor,
    clip_coef: float,
    clip_vloss: bool,
    vf_coef: float,
    ent_coef: float,
) -> dict[str, torch.Tensor]:
    """PPO loss terms for one minibatch.

    Shape contract: all inputs ``[N]``. ``advantage`` is used as given (normalise it before calling).
    Returns a plain dict (cheap inside the minibatch loop) with ``loss`` (the weighted sum to back-propagate),
    ``loss_policy``, ``loss_value``, ``loss_entropy`` (= −mean entropy) and detached diagnostics ``approx_kl``
    (the low-variance k3 estimator, E[(r − 1) − log r]), ``clip_fraction`` and ``entropy``.

    The value loss is ``0.5 · (V − target)²``, or with ``clip_vloss`` the elementwise max of the clipped and
    unclipped squared errors around ``old_value`` (PPO2 / CleanRL convention).
    """
    log_ratio = new_logprob - old_logprob
    ratio = log_ratio.exp()
    surrogate = torch.max(-advantage * ratio, -advantage * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef))
    loss_policy = surrogate.mean()

    if clip_vloss:
        clipped = old_value + (new_value - old_value).clamp(-clip_coef, clip_coef)
        squared = torch.max((new_value - value_target) ** 2, (clipped - value_target) ** 2)
    else:
        squared = (new_value - value_target) ** 2
    loss_value = 0.5 * squared.mean()
    loss_entropy = -entropy.mean()
    loss = loss_policy + vf_coef * loss_value + ent_coef * loss_entropy

    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip_coef).float().mean()
    return {
        "loss": loss,
        "loss_policy": loss_policy,
        "loss_value": loss_value,
        "loss_entropy": loss_entropy,
        "approx_kl": approx_kl,
        "clip_fraction": clip_fraction,
        "entropy": entropy.detach().mean(),
    }


def explained_variance(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``1 − Var[target − prediction] / Var[target]`` (NaN when the target is constant)."""
    var_target = target.var()
    return 1.0 - (target - prediction).var() / var_target
