"""Generalised Advantage Estimation (Schulman et al., 2016, eq. 16) with separate termination and truncation."""

from __future__ import annotations

import torch


def generalized_advantage_estimate(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(λ) over a time-major rollout.

    Shape contract: every input is ``[T, B]``; outputs ``(advantage, value_target)`` are ``[T, B]``.

    ``next_value[t]`` is ``V(final_obs[t])``, the value of the true successor of step ``t`` (before any
    auto-reset). Termination zeroes the bootstrap; truncation keeps it (the episode did not end in an
    absorbing state: this is the step that is easy to get wrong). Either one stops the λ-recursion, since
    ``t + 1`` belongs to a new episode::

        δ_t = r_t + γ (1 − term_t) V(s'_t) − V(s_t)
        A_t = δ_t + γ λ (1 − done_t) A_{t+1}

    Args:
        reward: ``r_t``.
        value: ``V(s_t)`` under the acting policy.
        next_value: ``V(final_obs_t)``.
        terminated: bool, episode ended in an absorbing state after step ``t``.
        truncated: bool, episode was cut by a time limit after step ``t``.
        gamma: discount.
        lam: GAE λ.
    """
    not_terminal = (~terminated).to(value.dtype)
    not_done = (~(terminated | truncated)).to(value.dtype)
    delta = reward + gamma * not_terminal * next_value - value
    decay = gamma * lam * not_done
    advantage = torch.empty_like(value)
    running = torch.zeros_like(value[0])
    for t in range(value.shape[0] - 1, -1, -1):
        running = delta[t] + decay[t] * running
        advantage[t] = running
    return advantage, advantage + value
