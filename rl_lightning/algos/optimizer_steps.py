"""Many optimiser steps per ``training_step`` without paying Lightning's per-step wrappers where they do nothing.

PPO takes ``update_epochs × num_minibatches`` optimiser steps inside one ``training_step``. Through Lightning,
each goes through ``manual_backward`` (strategy and precision plugins, ``on_before/after_backward`` hooks) and
``LightningOptimizer.step`` (closure, ``on_before_optimizer_step`` hooks, profiler, step counter): about 0.3 ms a
step on CPU, a quarter of a small minibatch step. On one device in full precision, with no profiler and no hook
overridden anywhere, all of that reduces to ``loss.backward()``, ``optimizer.step()`` and the step counter; this
class then calls torch directly and credits Lightning's counter once per update, so ``trainer.global_step`` still
counts optimiser steps. Anything else (DDP, mixed precision, a callback that watches gradients) keeps the
wrappers.

Several optimiser steps inside one ``training_step`` also meet mixed precision: Lightning's ``bf16-mixed`` (and
``16-mixed``) wraps the whole ``training_step`` in one ``torch.autocast`` region, and autocast caches each weight's
low-precision copy until that region ends. An in-place optimiser step does not invalidate the cache, so every
forward after the first step would read the weights as they were before it. ``fresh_low_precision_weights`` drops
the cache after each step; ``OptimizerSteps.step`` and ``RLModule.step_each`` call it.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.profilers import PassThroughProfiler
from lightning.pytorch.strategies import SingleDeviceStrategy
from lightning.pytorch.utilities.model_helpers import is_overridden

from rl_lightning.processes.learner_threads import follow_actors

_STEP_HOOKS = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")


class OptimizerSteps:
    """``backward(loss)`` and ``step()`` for one update's optimiser steps; ``finish()`` once after the last one.

    Args:
        module: the LightningModule being updated (attached to a Trainer or not: standalone updates, such as
            ``FailFast.reproduce``, always run on torch directly).
        optimizer: what ``module.optimizers()`` returned, or a plain torch optimizer.
    """

    def __init__(self, module: pl.LightningModule, optimizer: Any) -> None:
        self.module = module
        trainer = module._trainer
        self.direct = trainer is None or _wrappers_do_nothing(trainer, module)
        self.credit = trainer is not None and self.direct and isinstance(optimizer, LightningOptimizer)
        self.optimizer = optimizer.optimizer if self.credit else optimizer
        self.steps = 0

    def backward(self, loss: torch.Tensor) -> None:
        if self.direct:
            loss.backward()
        else:
            self.module.manual_backward(loss)

    def step(self) -> None:
        self.optimizer.step()
        fresh_low_precision_weights()
        self.stepped()

    def stepped(self) -> None:
        """Count a step taken (by ``step``, or by a compiled step that updated the weights itself)."""
        follow_actors()  # with data.borrow_idle_actor_cores: the next step's threads (learner_threads.py)
        self.steps += 1

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def finish(self) -> None:
        """Credit the steps taken on torch directly to Lightning's optimiser-step counter (``global_step``)."""
        if not self.credit:
            return
        progress = self.module.trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress
        for tracker in (progress.total, progress.current):
            tracker.ready += self.steps
            tracker.completed += self.steps
        self.steps = 0


def fresh_low_precision_weights() -> None:
    """After an optimiser step inside an autocast region: drop autocast's cached low-precision weight copies, so the
    next forward casts the updated weights (the cache lives until the outermost region exits; see the module doc)."""
    torch.clear_autocast_cache()  # outside autocast the cache is empty: nothing to test first


def _wrappers_do_nothing(trainer: pl.Trainer, module: pl.LightningModule) -> bool:
    if type(trainer.strategy) is not SingleDeviceStrategy or type(trainer.precision_plugin) is not Precision:
        return False
    if not isinstance(trainer.profiler, PassThroughProfiler):
        return False
    watchers = [module, *trainer.callbacks]
    return not any(
        is_overridden(hook, watcher, parent=_base_of(watcher)) for watcher in watchers for hook in _STEP_HOOKS
    )


def _base_of(watcher: Any) -> type:
    return pl.LightningModule if isinstance(watcher, pl.LightningModule) else pl.Callback
