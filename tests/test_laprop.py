"""Adaptive gradient clipping and the LaProp optimiser against a naive per-parameter loop (dreamer.md §6, I18)."""

from __future__ import annotations

import copy

import pytest
import torch

from rl_lightning.algos.dreamer.optim import LaProp, agc_clip_
from rl_lightning.errors import ConfigError


def _param(values, grad):
    param = torch.nn.Parameter(torch.tensor(values, dtype=torch.float64))
    param.grad = torch.tensor(grad, dtype=torch.float64)
    return param


def test_agc_rescales_large_updates_to_the_limit_and_leaves_small_ones():
    big = _param([3.0, 4.0], [30.0, 40.0])  # ‖p‖ = 5, ‖g‖ = 50 > 0.3·5
    small = _param([3.0, 4.0], [0.6, 0.8])  # ‖g‖ = 1 < 1.5
    tiny = _param([0.0, 0.0], [1.0, 0.0])  # ‖p‖ = 0 → floor pmin: limit 0.3·1e-3
    no_grad = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    agc_clip_([big, small, tiny, no_grad], clip=0.3, pmin=1e-3)
    torch.testing.assert_close(big.grad.norm(), torch.tensor(1.5, dtype=torch.float64))
    torch.testing.assert_close(big.grad, torch.tensor([0.9, 1.2], dtype=torch.float64))
    assert torch.equal(small.grad, torch.tensor([0.6, 0.8], dtype=torch.float64))
    torch.testing.assert_close(tiny.grad, torch.tensor([3e-4, 0.0], dtype=torch.float64))
    assert no_grad.grad is None


def naive_laprop(params, grads_per_step, lr, betas, eps, agc, pmin, warmup):
    """Reference: one Python loop per parameter tensor and step, written from the formulas in dreamer.md §6."""
    beta1, beta2 = betas
    params = [p.detach().clone() for p in params]
    mom = [torch.zeros_like(p) for p in params]
    rms = [torch.zeros_like(p) for p in params]
    for step, grads in enumerate(grads_per_step, start=1):
        for i, (p, g) in enumerate(zip(params, grads)):
            if agc:
                limit = agc * max(pmin, float(p.norm()))
                g = g / max(1.0, float(g.norm()) / limit)
            rms[i] = beta2 * rms[i] + (1 - beta2) * g * g
            u = g / ((rms[i] / (1 - beta2**step)).sqrt() + eps)
            mom[i] = beta1 * mom[i] + (1 - beta1) * u
            lr_t = lr * min(1.0, step / warmup) if warmup else lr
            params[i] = p - lr_t * mom[i] / (1 - beta1**step)
    return params


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).double()


def _grads(model, step):
    g = torch.Generator().manual_seed(100 + step)
    # Large gradients on some steps, so AGC clips some tensors and not others.
    scale = 50.0 if step % 3 == 0 else 0.01
    return [torch.randn(p.shape, generator=g, dtype=p.dtype) * scale for p in model.parameters()]


def _run(model, optimiser, steps):
    for step in steps:
        for p, grad in zip(model.parameters(), _grads(model, step)):
            p.grad = grad.clone()
        optimiser.step()


@pytest.mark.parametrize("agc", [0.3, 0.0])
def test_laprop_matches_naive_reference_through_warmup(agc):
    model = _model()
    start = [p.detach().clone() for p in model.parameters()]
    hyper = {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-20, "agc": agc, "agc_pmin": 1e-3, "warmup_steps": 8}
    optimiser = LaProp(model.parameters(), **hyper)
    _run(model, optimiser, range(20))
    grads = [_grads(model, step) for step in range(20)]
    expected = naive_laprop(start, grads, hyper["lr"], hyper["betas"], hyper["eps"], agc, 1e-3, 8)
    for got, want in zip(model.parameters(), expected):
        torch.testing.assert_close(got.detach(), want, rtol=1e-10, atol=1e-12)
    assert optimiser.state[next(model.parameters())]["step"] == 20


def test_laprop_leaves_grad_untouched_and_skips_params_without_grad():
    model = _model()
    optimiser = LaProp(model.parameters(), lr=1e-2)
    params = list(model.parameters())
    params[0].grad = torch.full_like(params[0], 100.0)
    before = [p.detach().clone() for p in params]
    optimiser.step()
    assert torch.equal(params[0].grad, torch.full_like(params[0], 100.0))
    assert not torch.equal(params[0], before[0])
    assert all(torch.equal(p, b) for p, b in zip(params[1:], before[1:]))
    assert len(optimiser.state) == 1


def test_laprop_state_dict_round_trip_continues_identically():
    model = _model()
    optimiser = LaProp(model.parameters(), lr=1e-2, warmup_steps=10)
    _run(model, optimiser, range(6))
    clone = copy.deepcopy(model)
    resumed = LaProp(clone.parameters(), lr=1e-2, warmup_steps=10)
    resumed.load_state_dict(copy.deepcopy(optimiser.state_dict()))
    _run(model, optimiser, range(6, 12))
    _run(clone, resumed, range(6, 12))
    for a, b in zip(model.parameters(), clone.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lr": 0.0}, "lr"),
        ({"betas": (0.9, 1.0)}, "betas"),
        ({"eps": -1.0}, "eps"),
        ({"agc": -0.1}, "agc"),
        ({"agc_pmin": 0.0}, "agc_pmin"),
        ({"warmup_steps": -1}, "warmup_steps"),
    ],
)
def test_laprop_rejects_bad_arguments(kwargs, field):
    with pytest.raises(ConfigError, match=f"model.{field}"):
        LaProp(_model().parameters(), **kwargs)
