"""GAE against a naive per-env loop, including truncation bootstrapped from final_obs."""

from __future__ import annotations

import torch

from rl_lightning.objectives import generalized_advantage_estimate


def naive_gae(reward, value, next_value, terminated, truncated, gamma, lam):
    T, B = reward.shape
    adv = torch.zeros(T, B, dtype=torch.float64)
    for b in range(B):
        last = 0.0
        for t in reversed(range(T)):
            bootstrap = 0.0 if terminated[t, b] else float(next_value[t, b])
            delta = float(reward[t, b]) + gamma * bootstrap - float(value[t, b])
            continues = not (terminated[t, b] or truncated[t, b])
            last = delta + gamma * lam * (last if continues else 0.0)
            adv[t, b] = last
    return adv


def test_gae_matches_naive_loop_with_terminations_and_truncations():
    g = torch.Generator().manual_seed(0)
    T, B = 37, 5
    reward = torch.randn(T, B, generator=g, dtype=torch.float64)
    value = torch.randn(T, B, generator=g, dtype=torch.float64)
    next_value = torch.randn(T, B, generator=g, dtype=torch.float64)
    terminated = torch.rand(T, B, generator=g) < 0.1
    truncated = (torch.rand(T, B, generator=g) < 0.1) & ~terminated
    adv, ret = generalized_advantage_estimate(reward, value, next_value, terminated, truncated, 0.97, 0.9)
    expected = naive_gae(reward, value, next_value, terminated, truncated, 0.97, 0.9)
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + value)


def test_truncation_bootstraps_and_termination_does_not():
    # One step, value of the successor = 10: truncation keeps γ·10, termination drops it.
    reward, value, nxt = torch.ones(1, 2), torch.zeros(1, 2), torch.full((1, 2), 10.0)
    terminated = torch.tensor([[True, False]])
    truncated = torch.tensor([[False, True]])
    adv, _ = generalized_advantage_estimate(reward, value, nxt, terminated, truncated, 0.9, 0.95)
    torch.testing.assert_close(adv, torch.tensor([[1.0, 1.0 + 0.9 * 10.0]]))


def test_lambda_one_gives_discounted_return_minus_value():
    T = 6
    reward = torch.arange(1.0, T + 1).unsqueeze(1)
    value = torch.zeros(T, 1)
    next_value = torch.zeros(T, 1)
    done = torch.zeros(T, 1, dtype=torch.bool)
    adv, _ = generalized_advantage_estimate(reward, value, next_value, done, done, 0.5, 1.0)
    expected = torch.tensor([sum(0.5**k * reward[t + k, 0] for k in range(T - t)) for t in range(T)]).unsqueeze(1)
    torch.testing.assert_close(adv, expected)
