"""``NoiseSteppedEnv``: a torch env whose step is a pure function of its state, the action and pre-drawn noise."""

from __future__ import annotations

from abc import abstractmethod

import torch
from tensordict import TensorDict

from rl_lightning.envs.base import TorchEnv


class NoiseSteppedEnv(TorchEnv):
    """A ``TorchEnv`` whose only per-step randomness (the auto-reset's start states) can be drawn ahead of time.

    This is what a fused, ``torch.compile``d rollout step (``rl_lightning.data.fused_step``) needs: a
    ``torch.Generator`` cannot enter a compiled graph, so the noise of a whole rollout is drawn in one call to
    ``step_noise`` outside it, and ``step_from_noise`` is pure (no generator, no host sync, no Python branch on
    tensor values, fixed shapes).

    ``step_state`` is ``step_noise`` for the batch followed by ``step_from_noise``: stepping with a generator draws
    one batch of noise per step, as these envs always did. Every env draws its noise every step, for every row,
    whether or not a row resets (fixed shapes; a row that goes on ignores its draw).
    """

    @abstractmethod
    def step_noise(self, generator: torch.Generator, lead: tuple[int, ...]) -> torch.Tensor:
        """The draws ``step_from_noise`` consumes for a batch of shape ``lead`` (``[*lead, ...]``, on the generator's
        device); ``lead`` is ``(B,)`` for one step or ``(T, B)`` for ``T`` steps."""

    @abstractmethod
    def step_from_noise(
        self, state: TensorDict, action: torch.Tensor, noise: torch.Tensor
    ) -> tuple[TensorDict, TensorDict]:
        """``(next_state, out)`` as ``TorchEnv.step_state`` returns them, with ``noise[b]`` (one step's draw) giving
        row ``b``'s new start state where it resets. ``state`` is left untouched."""

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        """One step with this step's noise drawn from ``generator``; see ``TorchEnv.step_state`` for the outputs."""
        next_state, out = self.step_from_noise(state, action, self.step_noise(generator, tuple(state.batch_size)))
        if inplace:
            state.update(next_state)
            return state, out
        return next_state, out
