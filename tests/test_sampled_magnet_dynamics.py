"""``benchmarks/games/sampled_magnet_dynamics.py``: the tabular model of PPO's uniform-magnet update. Its per-set
gradient against autograd on the reach-weighted objective, its noise unbiased, and its noiseless dynamics reaching
the fixed point ``regularised_equilibrium.py`` computes for PPO."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pyspiel = pytest.importorskip("pyspiel")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "games"))
import regularised_equilibrium as req  # noqa: E402
import sampled_magnet_dynamics as smd  # noqa: E402


def _autograd_gradient(logits: np.ndarray, q: np.ndarray, reach: float, alpha: float) -> np.ndarray:
    """∇ over the logits of ``reach · (Σ_a π(a) q(a) − α KL(π ‖ uniform))``: what PPO's loss ascends at one set."""
    z = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    pi = torch.softmax(z, 0)
    kl = (pi * (torch.log(pi) + np.log(len(logits)))).sum()
    (reach * ((pi * torch.tensor(q)).sum() - alpha * kl)).backward()
    return z.grad.numpy()


def test_expected_gradient_is_the_reach_weighted_objective_gradient() -> None:
    rng = np.random.default_rng(0)
    for actions in (2, 3):
        logits, q = rng.normal(size=actions), rng.normal(size=actions) * 2.0
        pi = smd._softmax(logits)
        got = smd.set_gradient(pi, q, reach=0.03, alpha=0.4, games=1000.0, sigma=3.5, rng=None)
        np.testing.assert_allclose(got, _autograd_gradient(logits, q, 0.03, 0.4), rtol=1e-10, atol=1e-12)


def test_sampled_gradient_is_unbiased_and_its_noise_shrinks_with_the_games() -> None:
    pi, q = np.array([0.2, 0.5, 0.3]), np.array([1.0, -0.5, 0.25])
    exact = smd.set_gradient(pi, q, reach=0.05, alpha=0.3, games=400.0, sigma=3.5, rng=None)
    rng = np.random.default_rng(1)
    spread = {}
    for games in (400.0, 6400.0):
        draws = np.array([smd.set_gradient(pi, q, 0.05, 0.3, games, 3.5, rng) for _ in range(20_000)])
        np.testing.assert_allclose(draws.mean(0), exact, atol=4 * draws.std(0).max() / np.sqrt(len(draws)))
        spread[games] = draws.std(0).max()
    assert spread[6400.0] == pytest.approx(spread[400.0] / 4.0, rel=0.1)  # ∝ 1 / sqrt(games)


def test_noiseless_dynamics_reach_ppos_fixed_point_on_kuhn() -> None:
    tree = req.Tree(pyspiel.load_game("kuhn_poker"))
    target, change = req.regularised_equilibrium(tree, 0.3, step=0.3, iterations=3000, future_kl=False)
    assert change < 1e-8
    # a step of 10 converges (30 oscillates); the least reached set (0.04 of games) sets the pace
    policy = smd.run(tree, updates=4000, games=1.0, sigma=0.0, step=10.0, weight_start=0.3, weight=0.3,
                     step_decay_from=1.0, exact=True)
    for got, want in zip(policy, target):
        np.testing.assert_allclose(got, want, atol=5e-4)
    assert req.exploitability(tree, policy) == pytest.approx(req.exploitability(tree, target), abs=1e-4)
