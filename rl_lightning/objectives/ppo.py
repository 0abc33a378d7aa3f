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
    weight: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """PPO loss terms for one minibatch.

    Shape contract: all inputs ``[N]``. ``advantage`` is used as given (normalise it before calling). ``weight``
    ``[N]`` (or ``None``: all 1) weighs each row's surrogate in the policy loss's mean (PPO's
    ``visit_weight_power``); the value and entropy terms and the diagnostics stay unweighted.
    Returns a plain dict (cheap inside the minibatch loop) with ``loss`` (the weighted sum to back-propagate),
    ``loss_policy``, ``loss_value``, ``loss_entropy`` (= −mean entropy) and detached diagnostics ``approx_kl``
    (the low-variance k3 estimator, E[(r − 1) − log r]), ``clip_fraction`` and ``entropy``.

    The value loss is ``0.5 · (V − target)²``, or with ``clip_vloss`` the elementwise max of the clipped and
    unclipped squared errors around ``old_value`` (PPO2 / CleanRL convention).
    """
    log_ratio = new_logprob - old_logprob
    ratio = log_ratio.exp()
    surrogate = torch.max(-advantage * ratio, -advantage * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef))
    loss_policy = surrogate.mean() if weight is None else (surrogate * weight).mean()

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


def all_actions_policy_loss(
    logits: torch.Tensor,
    behaviour_probs: torch.Tensor,
    action_advantage: torch.Tensor,
    mask: torch.Tensor | None,
    clip_coef: float | torch.Tensor,
    weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """PPO's clipped surrogate in expectation over the behaviour policy's actions, from per-action advantages.

    ``Σ_a π_b(a|s) · max(−A(s,a)·r_a, −A(s,a)·clip(r_a, 1 ± ε))`` with ``r_a = π_θ(a|s) / π_b(a|s)``, averaged over
    rows (``weight`` ``[N]`` weighs each row, as in ``ppo_loss``). Sampling ``a ~ π_b`` turns it into PPO's usual
    one-action surrogate, so this is its all-actions form (Q-based policy gradient, Srinivasan et al. 2018): every
    legal action's advantage, not one sampled action's, moves the policy at each visited state.

    Shape contract: ``logits`` ``[N, A]`` raw (illegal entries masked here), ``behaviour_probs`` ``[N, A]`` (0 at
    illegal actions), ``action_advantage`` ``[N, A]``, ``mask`` ``[N, A]`` bool or ``None``. Returns a scalar.
    Actions the behaviour policy gives probability 0 contribute nothing (their ratio is undefined).
    """
    if mask is None:
        mask = torch.ones_like(logits, dtype=torch.bool)
    probs = torch.softmax(logits.masked_fill(~mask, torch.finfo(logits.dtype).min), -1)
    support = mask & (behaviour_probs > 0)
    ratio = torch.where(support, probs / behaviour_probs.clamp_min(torch.finfo(probs.dtype).tiny), 1.0)
    clipped = ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
    surrogate = torch.max(-action_advantage * ratio, -action_advantage * clipped)
    per_row = torch.where(support, behaviour_probs * surrogate, 0.0).sum(-1)
    return per_row.mean() if weight is None else (per_row * weight).mean()
