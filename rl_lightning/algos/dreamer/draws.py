"""Every random number of one DreamerV3 gradient step, drawn before the step from the module's generator.

A ``torch.Generator`` cannot enter a compiled graph, so the step takes its noise as tensors (``compile_update``);
the eager step uses the same draws. They come from the generator in the order the step consumes them (the posterior
samples of the observe scan, then per imagination step the action and the prior sample), so a CPU step samples
exactly what drawing inside the step would.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rl_lightning.algos.dreamer.policy import ActionSpace
from rl_lightning.networks.rssm import RSSM


@dataclass
class GradientStepDraws:
    """The draws of one gradient step on a ``[T, B]`` batch with imagination horizon ``H`` from ``N = T·B`` starts.

    Attributes:
        posterior: ``U[0, 1)`` ``[T, B, stoch, classes]``, the observe scan's posterior samples.
        action: ``[H+1, N, A]``, the actor's samples at each imagined state (``ActionSpace.draw_noise``).
        prior: ``U[0, 1)`` ``[H, N, stoch, classes]``, the imagination's prior samples.
    """

    posterior: torch.Tensor
    action: torch.Tensor
    prior: torch.Tensor

    @classmethod
    def draw(
        cls,
        generator: torch.Generator,
        length: int,
        batch: int,
        horizon: int,
        rssm: RSSM,
        space: ActionSpace,
        device: torch.device,
    ) -> GradientStepDraws:
        latent = (rssm.stoch, rssm.classes)
        options = {"generator": generator, "device": device, "dtype": torch.float32}
        posterior = torch.rand((length, batch, *latent), **options)
        starts = length * batch
        actions, priors = [], []
        for step in range(horizon + 1):
            actions.append(space.draw_noise((starts,), generator, device, torch.float32))
            if step < horizon:
                priors.append(torch.rand((starts, *latent), **options))
        return cls(posterior, torch.stack(actions), torch.stack(priors))
