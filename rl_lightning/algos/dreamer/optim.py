"""Optimisers: the 2024 DreamerV3 LaProp chain with adaptive gradient clipping (dreamer.md §6).

DreamerV3 (2024 code, arXiv 2301.04104v2 / Nature) trains every network with one optimiser built from
``clip_by_agc(0.3) → scale_by_rms(β2) → scale_by_momentum(β1) → lr`` (Ziyin et al., 2020, "LaProp": normalise, then
take momentum of the normalised update; Brock et al., 2021, adaptive gradient clipping, per parameter tensor).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from rl_lightning.errors import ConfigError


def _agc_divisors(
    params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], clip: float, pmin: float
) -> list[torch.Tensor]:
    """Per-tensor ``max(1, ‖g‖ / (clip · max(pmin, ‖p‖)))`` as 0-dim tensors (no host sync)."""
    grad_norms = torch._foreach_norm(grads)
    param_norms = torch._foreach_norm(params)
    torch._foreach_clamp_min_(param_norms, pmin)
    torch._foreach_mul_(param_norms, clip)
    ratios = torch._foreach_div(grad_norms, param_norms)
    torch._foreach_clamp_min_(ratios, 1.0)
    return [ratio.to(grad.dtype) for ratio, grad in zip(ratios, grads)]


def agc_clip_(params: Iterable[torch.Tensor], clip: float = 0.3, pmin: float = 1e-3) -> None:
    """Adaptive gradient clipping in place, per parameter tensor (Brock et al., 2021; dreamer.md §6, I18).

    ``g ← g / max(1, ‖g‖ / (clip · max(pmin, ‖p‖)))``: a gradient larger than ``clip`` times its parameter's norm is
    rescaled to exactly that norm; smaller ones are untouched. Parameters without a gradient are skipped.

    Args:
        params: parameters whose ``.grad`` is clipped.
        clip: maximum ratio of gradient norm to parameter norm (0.3 in DreamerV3).
        pmin: floor on the parameter norm, so zero-initialised tensors can still move (1e-3).
    """
    with_grad = [p for p in params if p.grad is not None]
    if not with_grad:
        return
    grads = [p.grad for p in with_grad]
    torch._foreach_div_(grads, _agc_divisors(with_grad, grads, clip, pmin))


def _check(name: str, value: Any, ok: bool, rule: str) -> None:
    if not ok:
        raise ConfigError(f"LaProp: {name}={value!r} must be {rule}; set model.{name} accordingly")


class LaProp(torch.optim.Optimizer):
    """The 2024 DreamerV3 optimiser: AGC, then RMS normalisation, then momentum (LaProp), with linear lr warmup.

    Per parameter tensor with gradient ``g`` at its step ``t`` (1-based)::

        g  ← g / max(1, ‖g‖ / (agc · max(agc_pmin, ‖p‖)))          (skipped when agc = 0)
        v  ← β2·v + (1 − β2)·g²;           u = g / (sqrt(v / (1 − β2^t)) + eps)
        m  ← β1·m + (1 − β1)·u;            p ← p − lr · min(1, t / warmup_steps) · m / (1 − β1^t)

    Weight decay is 0. The clipping works on a copy: ``p.grad`` is left as the caller computed it. The state per
    parameter (``step`` as a Python int, ``exp_avg`` = m, ``exp_avg_sq`` = v) lives in the standard optimiser
    ``state_dict``. The step counter is host-side bookkeeping; the update itself never syncs with the device.

    Args:
        params: parameters or parameter groups.
        lr: peak learning rate after warmup (4e-5 in DreamerV3).
        betas: ``(β1, β2)``, momentum and RMS decay (0.9, 0.999).
        eps: added to the RMS denominator (1e-20).
        agc: adaptive clipping ratio; 0 disables (0.3).
        agc_pmin: floor on the parameter norm in the clipping (1e-3).
        warmup_steps: linear warmup length in optimiser steps; 0 disables (1000).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 4e-5,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-20,
        agc: float = 0.3,
        agc_pmin: float = 1e-3,
        warmup_steps: int = 1000,
    ) -> None:
        _check("lr", lr, lr > 0.0, "> 0 (DreamerV3 uses 4e-5)")
        _check("betas", betas, len(betas) == 2 and all(0.0 <= b < 1.0 for b in betas), "two floats in [0, 1)")
        _check("eps", eps, eps >= 0.0, ">= 0 (DreamerV3 uses 1e-20)")
        _check("agc", agc, agc >= 0.0, ">= 0 (0 disables clipping; DreamerV3 uses 0.3)")
        _check("agc_pmin", agc_pmin, agc_pmin > 0.0, "> 0 (DreamerV3 uses 1e-3)")
        _check("warmup_steps", warmup_steps, int(warmup_steps) == warmup_steps >= 0, "an integer >= 0")
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "agc": agc,
            "agc_pmin": agc_pmin,
            "warmup_steps": int(warmup_steps),
        }
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Apply one update to every parameter with a gradient; returns the closure's loss if one is given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._update_group(group, params)
        return loss

    def _state_for(self, param: torch.Tensor) -> dict[str, Any]:
        state = self.state[param]
        if not state:
            if param.grad.is_sparse:
                raise RuntimeError("LaProp does not support sparse gradients")
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["step"] = int(state["step"]) + 1
        return state

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        states = [self._state_for(p) for p in params]
        steps = [s["step"] for s in states]
        grads = [p.grad for p in params]
        if group["agc"] > 0.0:
            grads = torch._foreach_div(grads, _agc_divisors(params, grads, group["agc"], group["agc_pmin"]))
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        # scale_by_rms: v ← β2 v + (1 − β2) g², u = g / (sqrt(v̂) + eps)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)
        denom = torch._foreach_div(exp_avg_sqs, [1.0 - beta2**t for t in steps])
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, group["eps"])
        normalised = torch._foreach_div(grads, denom)
        # scale_by_momentum on the normalised update: m ← β1 m + (1 − β1) u, then m̂ = m / (1 − β1^t)
        torch._foreach_lerp_(exp_avgs, normalised, 1.0 - beta1)
        warmup = group["warmup_steps"]
        step_sizes = [-group["lr"] * (min(1.0, t / warmup) if warmup else 1.0) / (1.0 - beta1**t) for t in steps]
        torch._foreach_add_(params, torch._foreach_mul(exp_avgs, step_sizes))
