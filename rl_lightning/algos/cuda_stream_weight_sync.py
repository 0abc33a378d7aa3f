"""``CUDAStreamWeightSync``: hands the learner's new weights to the actor in order, on a side stream (DESIGN §7)."""

from __future__ import annotations

import copy
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn
from typing_extensions import override

from rl_lightning.data.stream_handoff import CudaStreamOps
from rl_lightning.errors import ConfigError


class CUDAStreamWeightSync(Callback):
    """After every ``every_n_updates``-th update, copy learner → actor weights on a side stream.

    The module declares what the actor needs with ``acting_networks()`` (an ``nn.ModuleDict``). On a CUDA device
    the callback gives the module an actor copy (``module.actor_networks``, not a registered submodule, so it is
    neither checkpointed nor wrapped by DDP) and, in ``on_train_batch_end`` after the optimiser steps:

    1. the side stream waits on the learner's stream (it must read the final parameters) and on the datamodule's
       ``actor_stream`` (the running actor window must finish reading the old copy before it is overwritten);
    2. on the side stream, ``_foreach_copy_`` learner → actor (parameters and buffers);
    3. records ``module.policy_ready_event`` on the side stream and sets ``module.actor_version``; the learner's
       stream waits on it too, since its next optimiser step overwrites the weights being read;
    4. the actor stream waits on that event before its next window (``DreamerDataModule``).

    No host sync: nothing waits on the CPU. On CPU there are no streams and nothing to copy: the actor aliases the
    learner's weights (``actor_networks`` stays ``None``), which is free and always current.

    ``module.policy_ready_event`` is the module's public promise about ``actor_networks``: any work that reads the
    actor copy on a stream other than the side stream (the actor window, the ``Evaluation`` callback acting with
    ``module.player``) must first make its stream wait on it (``stream.wait_event(event)``) when it is not
    ``None``. It is ``None`` on CPU, before the first hand-off of a fit, and after ``on_fit_end``; the callback
    sets it to ``None`` at every fit start so an event of an earlier fit is never waited on. At ``on_fit_end`` the
    host waits for the side stream and the actor stream before the actor copy is freed (they may still use it).

    Args:
        every_n_updates: learner updates between hand-offs (1 = after every update).
    """

    def __init__(self, every_n_updates: int = 1) -> None:
        if every_n_updates < 1:
            raise ConfigError(f"CUDAStreamWeightSync: every_n_updates={every_n_updates} must be >= 1")
        self.every_n_updates = every_n_updates
        self.stream: Any = None
        self.ops: Any = CudaStreamOps()  # the stream primitives; a recorder in CPU tests of the order
        self.syncs = 0
        self._src: list[torch.Tensor] = []
        self._dst: list[torch.Tensor] = []

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(every_n_updates=self.every_n_updates)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        method = getattr(pl_module, "acting_networks", None)
        if not callable(method):
            raise ConfigError(
                f"CUDAStreamWeightSync: {type(pl_module).__name__} has no acting_networks(); "
                "use it with a module whose actor can run from a copy (DreamerV3)"
            )
        pl_module.policy_ready_event = None  # type: ignore[assignment]
        if pl_module.device.type != "cuda":
            return  # CPU: the actor aliases the learner's weights
        learner: nn.ModuleDict = method()
        actor = copy.deepcopy(learner).requires_grad_(False)
        object.__setattr__(pl_module, "actor_networks", actor)  # unregistered: not in state_dict, not in DDP
        self._src = [*learner.parameters(), *learner.buffers()]
        self._dst = [*actor.parameters(), *actor.buffers()]
        self.stream = torch.cuda.Stream(pl_module.device)
        pl_module.actor_version = pl_module.policy_version  # type: ignore[assignment]

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.stream is None:
            return
        version = int(getattr(pl_module, "policy_version", 0))
        if version == pl_module.actor_version or version % self.every_n_updates != 0:  # type: ignore[attr-defined]
            return
        self.hand_off(pl_module, getattr(trainer.datamodule, "actor_stream", None))

    def hand_off(self, pl_module: pl.LightningModule, actor_stream: Any = None) -> None:
        """Enqueue the ordered copy and publish ``policy_ready_event`` (see the class docstring)."""
        ops = self.ops
        ops.wait_stream(self.stream, ops.current(self.stream))  # the learner's optimiser step has run
        if actor_stream is not None:
            ops.wait_stream(self.stream, actor_stream)  # the running actor window has read the old copy
        with ops.use(self.stream), torch.no_grad():
            torch._foreach_copy_(self._dst, self._src, non_blocking=True)
            event = ops.record(self.stream)
        # The learner's next optimiser step overwrites what the copy reads. Its next cycle waits for the running
        # window anyway (to sample its rows), so this costs no overlap.
        ops.wait_event(ops.current(self.stream), event)
        pl_module.policy_ready_event = event  # type: ignore[assignment]
        pl_module.actor_version = pl_module.policy_version  # type: ignore[attr-defined]
        self.syncs += 1

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.stream is not None:
            self.ops.synchronize(self.stream)
            actor_stream = getattr(getattr(trainer, "datamodule", None), "actor_stream", None)
            if actor_stream is not None:
                self.ops.synchronize(actor_stream)  # its last window may still read the copy freed below
        object.__setattr__(pl_module, "actor_networks", None)
        pl_module.policy_ready_event = None  # type: ignore[assignment]
        self.stream = None
        self._src, self._dst = [], []

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"syncs": self.syncs}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.syncs = int(state_dict.get("syncs", 0))


def wait_for_policy(pl_module: Any) -> None:
    """Make the current CUDA stream wait until the acting weights are copied (``CUDAStreamWeightSync``).

    ``policy_ready_event`` is recorded on the weight-sync side stream after the copy; without the wait, the
    evaluation's first forward pass could read a half-written acting copy. ``Event.wait()`` enqueues the wait
    on the current stream and does not block the host.
    """
    event = getattr(pl_module, "policy_ready_event", None)
    if event is not None:
        event.wait()
