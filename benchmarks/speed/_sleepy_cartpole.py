"""A slow simulator stand-in for ``ray_actors.py``: the torch CartPole sleeping at every batched step."""

from __future__ import annotations

import time

import torch
from tensordict import TensorDict

from rl_lightning.envs import CartPole


class SleepyCartPole(CartPole):
    """CartPole whose ``step_state`` first sleeps ``step_ms`` per env of the batch (a simulator whose every env costs
    time; the sleep leaves the core free, as one waiting on I/O or another process would, so more actors than cores
    still add throughput).

    Args:
        step_ms: milliseconds slept per env per step; 0 is the plain CartPole.
    """

    def __init__(self, step_ms: float = 2.0) -> None:
        super().__init__()
        self.step_ms = step_ms

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        if self.step_ms > 0:
            time.sleep(self.step_ms / 1e3 * action.shape[0])
        return super().step_state(state, action, generator, inplace)
