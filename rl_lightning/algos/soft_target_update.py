"""``SoftTargetUpdate``: Polyak averaging of target networks after every optimiser step, not every batch."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils.hooks import RemovableHandle
from typing_extensions import override

from rl_lightning.errors import ConfigError


class SoftTargetUpdate(Callback):
    """Moves each target network towards its online network: ``target ← (1 − tau)·target + tau·online``.

    Fires after every ``every_n_steps``-th step of one optimiser, from a torch post-step hook registered in
    ``on_fit_start`` and removed in ``on_fit_end``/``teardown``: under manual optimisation one ``training_step``
    may take many optimiser steps and Lightning has no after-optimiser-step hook. Skipped steps (inf gradients
    under a grad scaler) do not fire.

    The pairs come from the module's ``target_networks()``, a list of ``(online, target)`` modules with matching
    parameters. Target parameters must not require grad (``target.requires_grad_(False)``) and must not be in any
    optimiser; buffers (e.g. normalisation statistics) are copied from online to target, not averaged.

    Args:
        tau: the Polyak coefficient in (0, 1]; ``1`` copies the online weights (a hard update).
        every_n_steps: update after every this many steps of the driving optimiser.
        optimizer_index: the optimiser whose steps drive the cadence (index into ``trainer.optimizers``); with
            several optimisers (actor and critic), the update runs once per step of this one only.
    """

    def __init__(self, tau: float = 0.005, every_n_steps: int = 1, optimizer_index: int = 0) -> None:
        if not 0.0 < tau <= 1.0:
            raise ConfigError(f"SoftTargetUpdate: tau={tau} must be in (0, 1]")
        if every_n_steps < 1:
            raise ConfigError(f"SoftTargetUpdate: every_n_steps={every_n_steps} must be >= 1")
        if optimizer_index < 0:
            raise ConfigError(f"SoftTargetUpdate: optimizer_index={optimizer_index} must be >= 0")
        self.tau = tau
        self.every_n_steps = every_n_steps
        self.optimizer_index = optimizer_index
        self.steps = 0  # steps of the driving optimiser seen so far (checkpointed)
        self._handle: RemovableHandle | None = None
        self._params: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])  # (target, online)
        self._buffers: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])  # (target, online)

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(tau=self.tau, every_n_steps=self.every_n_steps)

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        method = getattr(pl_module, "target_networks", None)
        if stage == "fit" and not (callable(method) and list(method())):
            raise ConfigError(
                f"SoftTargetUpdate: {type(pl_module).__name__} declares no target networks "
                "(implement target_networks() returning (online, target) pairs)"
            )

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._handle is not None:
            return
        if self.optimizer_index >= (n := len(trainer.optimizers)):
            raise ConfigError(
                f"SoftTargetUpdate: optimizer_index={self.optimizer_index} must be < {n}, the number of optimisers"
            )
        self._params, self._buffers = ([], []), ([], [])
        for index, (online, target) in enumerate(pl_module.target_networks()):
            for kind, cache in (("parameters", self._params), ("buffers", self._buffers)):
                online_t, target_t = list(getattr(online, kind)()), list(getattr(target, kind)())
                if [t.shape for t in online_t] != [t.shape for t in target_t]:
                    raise ValueError(
                        f"SoftTargetUpdate: pair {index} online/target {kind} differ in count or shape "
                        f"({len(online_t)} vs {len(target_t)} tensors); the target must be a copy of the online net"
                    )
                if kind == "parameters" and any(t.requires_grad for t in target_t):
                    raise ValueError(f"SoftTargetUpdate: pair {index} target requires grad; call requires_grad_(False)")
                cache[0].extend(target_t)
                cache[1].extend(online_t)
        self._handle = trainer.optimizers[self.optimizer_index].register_step_post_hook(self._on_optimizer_step)

    def should_update(self) -> bool:
        """Cadence predicate (overridable): true on every ``every_n_steps``-th optimiser step."""
        return self.steps % self.every_n_steps == 0

    @torch.no_grad()
    def update(self) -> None:
        """Apply one Polyak step to every cached pair and copy the buffers."""
        torch._foreach_lerp_(self._params[0], self._params[1], self.tau)
        if self._buffers[0]:
            torch._foreach_copy_(self._buffers[0], self._buffers[1])

    def _on_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.steps += 1
        if self.should_update():
            self.update()

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.teardown(trainer, pl_module, "fit")

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._handle is not None:
            self._handle.remove()
        self._handle, self._params, self._buffers = None, ([], []), ([], [])

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.steps = state_dict["steps"]
