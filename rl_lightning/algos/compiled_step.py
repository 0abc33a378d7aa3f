"""PPO's whole minibatch step (loss, gradients, gradient clipping, Adam) as one ``torch.compile``d function.

A PPO update on a small MLP is hundreds of optimiser steps on 64-row minibatches; each step costs its kernel launches
and Python around them, not its arithmetic (benchmarks/NOTES.md: ~3 ms a step on one core, forward 14%, backward
16%, optimiser 8%, clipping 5% of a HalfCheetah fit). Compiling the loss alone fuses its forward and backward but
leaves clipping and Adam as eager per-tensor calls; here the gradients come from ``torch.func.grad_and_value`` (no
``backward()`` to break the graph), so the clip and Adam's update trace into the same graph and inductor fuses the
whole step (measured on Ant's 64×64 MLPs: 0.98 ms against 3.0-3.5 ms eager).

The arithmetic is ``clip_grad_norm_`` then ``torch.optim.Adam``'s (weight decay, bias corrections, ``eps`` after
the square root), on the optimiser's own state tensors (``step``, ``exp_avg``, ``exp_avg_sq``), so checkpoints,
resumes and an eager step afterwards see what eager Adam would have left. It applies where the step runs on torch
directly (``OptimizerSteps.direct``: one device, full precision, no hook watching gradients) and the optimiser is a
plain Adam; ``eligibility`` says why not otherwise, and the caller compiles the loss alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, grad_and_value

_ADAM_DEFAULTS = {"amsgrad": False, "maximize": False, "differentiable": False}


def eligibility(optimizer: torch.optim.Optimizer, direct: bool) -> str | None:
    """``None`` where the whole step can compile; otherwise what stands in the way, in a few words."""
    if not direct:
        return "the step goes through Lightning's wrappers (several devices, mixed precision or a gradient hook)"
    if type(optimizer) is not torch.optim.Adam:
        return f"the optimiser is {type(optimizer).__name__}, not torch.optim.Adam"
    for group in optimizer.param_groups:
        for name, default in _ADAM_DEFAULTS.items():
            if group.get(name, default) != default:
                return f"Adam's {name}={group[name]}"
    for name in ("betas", "eps", "weight_decay"):
        if len({repr(group[name]) for group in optimizer.param_groups}) > 1:
            return f"the parameter groups differ in Adam's {name}"
    return None


class _Loss(nn.Module):
    """``module.minibatch_loss`` as a module's ``forward``, so ``functional_call`` can swap the weights it reads."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, mb: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.module.minibatch_loss(mb)


class CompiledMinibatchStep:
    """``step(mb)``: one optimiser step of ``module`` on a minibatch; returns its loss terms with the gradient norm
    (before clipping) last, as ``PPOUpdate._minibatch_step`` does.

    Args:
        module: the PPO (or subclass) being updated; its ``minibatch_loss`` must be pure tensor code.
        optimizer: the plain ``torch.optim.Adam`` over its parameters (``eligibility`` is ``None``).
        max_norm: the gradient-norm clip (``inf``: none).
    """

    def __init__(self, module: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float) -> None:
        self.optimizer = optimizer
        owner = {id(p): name for name, p in module.named_parameters()}
        self.params: list[torch.Tensor] = []
        self.names: list[str] = []
        self.group_of: list[int] = []  # the group (by id) each parameter's lr comes from
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self.params.append(p)
                    self.names.append("module." + owner[id(p)])
                    self.group_of.append(id(group))
        betas = {tuple(group["betas"]) for group in optimizer.param_groups}
        eps = {group["eps"] for group in optimizer.param_groups}
        decay = {group["weight_decay"] for group in optimizer.param_groups}
        (beta1, beta2), eps_value, weight_decay = betas.pop(), eps.pop(), decay.pop()
        loss = _Loss(module)
        names = self.names

        def step(
            params: list[torch.Tensor],
            exp_avgs: list[torch.Tensor],
            exp_avg_sqs: list[torch.Tensor],
            steps: list[torch.Tensor],
            lrs: torch.Tensor,
            mb: dict[str, Any],
        ) -> torch.Tensor:
            def loss_of(weights: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
                return functional_call(loss, weights, (mb,), strict=False)

            grads, (_, terms) = grad_and_value(loss_of, has_aux=True)(dict(zip(names, params)))
            grads = [grads[name] for name in names]
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
            coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)  # clip_grad_norm_'s
            with torch.no_grad():
                for i, (p, exp_avg, exp_avg_sq, count) in enumerate(zip(params, exp_avgs, exp_avg_sqs, steps)):
                    g = grads[i] * coef
                    if weight_decay:
                        g = g + weight_decay * p
                    count.add_(1)
                    exp_avg.lerp_(g, 1 - beta1)
                    exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                    bias1, bias2 = 1 - beta1**count, 1 - beta2**count
                    denom = (exp_avg_sq.sqrt() / bias2.sqrt()).add_(eps_value)
                    p.sub_(lrs[i] / bias1 * exp_avg / denom)
            return torch.cat([terms, norm.reshape(1)])

        self._step: Callable[..., torch.Tensor] = torch.compile(step, dynamic=False)
        self._lrs: torch.Tensor | None = None
        self._lr_key: tuple[float, ...] = ()
        self.refresh()

    def refresh(self) -> None:
        """Bind the step to the optimiser's state tensors as they are now (a checkpoint restore replaces them);
        called before each update. New tensors of the same shapes reuse the compiled graph."""
        self._fill_state()
        state = [self.optimizer.state[p] for p in self.params]
        self._weights = [p.detach() for p in self.params]  # the same storage: updated in place
        self._exp_avgs = [s["exp_avg"] for s in state]
        self._exp_avg_sqs = [s["exp_avg_sq"] for s in state]
        self._steps = [s["step"] for s in state]

    def _fill_state(self) -> None:
        """Adam's state for parameters it has not stepped yet, as ``torch.optim.Adam`` would create it."""
        for p in self.params:
            state = self.optimizer.state[p]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            elif state["step"].device != p.device:  # an eager, non-fused Adam keeps its step count on the CPU
                state["step"] = state["step"].to(p.device)

    def _learning_rates(self) -> torch.Tensor:
        """Each parameter's current lr as one tensor (an annealed lr changes it between updates, not the graph)."""
        by_group = {id(group): float(group["lr"]) for group in self.optimizer.param_groups}
        key = tuple(by_group[g] for g in self.group_of)
        if key != self._lr_key:
            self._lr_key = key
            self._lrs = torch.tensor(key, dtype=torch.float32, device=self.params[0].device)
        assert self._lrs is not None
        return self._lrs

    def step(self, mb: dict[str, Any]) -> torch.Tensor:
        return self._step(self._weights, self._exp_avgs, self._exp_avg_sqs, self._steps, self._learning_rates(), mb)
