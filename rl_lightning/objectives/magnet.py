"""The magnet term of Magnetic Mirror Descent (Sokota et al., ICLR 2023) as a pure function, and its weight schedule.

MMD's update for a two-player zero-sum game (their eq. 4, the deep-RL form of §5) adds ``α · KL(π_θ(·|s) ‖ ρ(·|s))``
to the policy loss: the reverse KL from the policy to a *magnet* ρ (uniform over the legal actions, a slow moving
average of the policy, or a reference policy such as a behaviour-cloned start). With a uniform magnet it is
entropy regularisation up to a constant (``log |legal| − H(π)``); its fixed point is a regularised equilibrium whose
exploitability shrinks with α, so α is annealed (Rudolph et al., ICLR 2026, tune PPO this way for poker games).
"""

from __future__ import annotations

import math

import torch

#: Weight schedules over env steps.
SCHEDULES = ("constant", "linear", "exponential")


def magnet_kl(logits: torch.Tensor, magnet_logits: torch.Tensor | None, mask: torch.Tensor | None) -> torch.Tensor:
    """``KL(π ‖ ρ)`` per row over the legal actions, differentiable in ``logits``.

    Shape contract: ``logits`` ``[N, A]`` (raw; illegal entries are masked here), ``magnet_logits`` ``[N, A]`` or
    ``None`` for the uniform magnet over the legal actions, ``mask`` ``[N, A]`` bool (True = legal) or ``None``
    (all legal). Returns ``[N]``. The magnet is a target: no gradient flows into ``magnet_logits``.
    """
    if mask is None:
        mask = torch.ones_like(logits, dtype=torch.bool)
    low = torch.finfo(logits.dtype).min
    log_p = torch.log_softmax(logits.masked_fill(~mask, low), -1)
    if magnet_logits is None:
        log_q = -mask.sum(-1, keepdim=True).to(logits.dtype).log().expand_as(log_p)
    else:
        log_q = torch.log_softmax(magnet_logits.detach().masked_fill(~mask, low), -1)
    terms = log_p.exp() * (log_p - log_q)
    return torch.where(mask, terms, torch.zeros_like(terms)).sum(-1)


def magnet_weight(schedule: str, coef: float, final_coef: float, progress: float) -> float:
    """α after ``progress`` (env steps / decay steps, clamped to [0, 1]) of the schedule.

    ``constant``: ``coef``; ``linear``: ``coef → final_coef`` in a straight line; ``exponential``: geometric,
    ``coef · (final_coef / coef) ** progress`` (both must be > 0). After the decay it stays at ``final_coef``.
    """
    progress = min(max(progress, 0.0), 1.0)
    if schedule == "constant":
        return coef
    if schedule == "linear":
        return coef + (final_coef - coef) * progress
    if schedule == "exponential":
        return coef * math.exp(math.log(final_coef / coef) * progress)
    raise ValueError(f"schedule={schedule!r} is not a magnet schedule; choose one of {list(SCHEDULES)}")
