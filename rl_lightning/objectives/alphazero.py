"""AlphaZero's loss (Silver et al., Science 2018) as a pure function: the policy's cross-entropy to the search's
visit distribution and the value's squared error to the game's result.

``l = −π_searchᵀ log p + vf_coef · ½ (z − v)²`` per decision, averaged over a minibatch (AlphaZero's own form is
``(z − v)² − πᵀ log p + c‖θ‖²``; the ½ keeps ``vf_coef`` on PPO's scale, the weight decay is the optimiser's).
"""

from __future__ import annotations

import torch


def soft_cross_entropy(log_p: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``−Σ_a target·log p`` per row (``[N]``), with ``0 · log 0 = 0``: zero-target entries (illegal actions at the
    dtype's minimum, or moves a search ruled out) add nothing, never NaN or inf."""
    return -torch.where(target > 0, target * log_p, 0.0).sum(-1)


def alphazero_loss(
    logits: torch.Tensor, value: torch.Tensor, search_policy: torch.Tensor, value_target: torch.Tensor, vf_coef: float
) -> dict[str, torch.Tensor]:
    """The loss of one minibatch and its parts.

    Shape contract: ``logits`` ``[N, A]`` already masked (illegal actions at the dtype's minimum), ``value`` and
    ``value_target`` ``[N]``, ``search_policy`` ``[N, A]`` summing to 1 per row with no mass on illegal actions.
    Returns scalars: ``loss``, ``loss_policy`` (the cross-entropy), ``loss_value`` (½ MSE), ``search_kl``
    (``KL(π_search ‖ p)``: how far the network is from its search, 0 when it plays what the search plays) and
    ``entropy`` (of ``p``).
    """
    log_p = torch.log_softmax(logits, -1)
    p = log_p.exp()
    cross_entropy = soft_cross_entropy(log_p, search_policy)
    target_entropy = soft_cross_entropy(search_policy.clamp_min(1e-30).log(), search_policy)
    entropy = soft_cross_entropy(log_p, p)
    loss_policy = cross_entropy.mean()
    loss_value = 0.5 * (value - value_target).pow(2).mean()
    return {
        "loss": loss_policy + vf_coef * loss_value,
        "loss_policy": loss_policy,
        "loss_value": loss_value,
        "search_kl": (cross_entropy - target_entropy).mean(),
        "entropy": entropy.mean(),
    }
