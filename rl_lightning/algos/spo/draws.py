"""Where SMC search gets its randomness: a ``torch.Generator`` as it goes, or noise drawn before the search.

The search (``search.py``) asks for six kinds of draw: the root's Dirichlet noise and perturbation, the root
actions, each depth's env step, each depth's proposals, each resample and the read-out. ``GeneratorDraws`` takes
them from a generator in the order the search asks (the default path). ``NoiseDraws`` holds them as tensors drawn
in one go before the search (``NoiseDraws.draw``), so the search becomes a pure function of its inputs that
``torch.compile`` can take whole (a generator cannot enter a compiled graph): its env must be a
``NoiseSteppedEnv``, and resampling inverts the weights' CDF at uniform draws instead of calling
``torch.multinomial``. The two give the same distributions from different random streams.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict

from rl_lightning.algos.spo.prior import ActorCriticPrior, PolicyParams, gamma_sample
from rl_lightning.envs.base import TorchEnv
from rl_lightning.envs.noise_step import NoiseSteppedEnv
from rl_lightning.networks import distributions as D


def resample_indices(log_weights: torch.Tensor, temperature: torch.Tensor, generator: torch.Generator | None):
    """Multinomial resampling: ``N`` draws per env from ``softmax(w / η)``; returns indices ``[E, N]``."""
    probs = (log_weights / temperature).softmax(-1)
    return torch.multinomial(probs, log_weights.shape[-1], replacement=True, generator=generator)


def resample_from_uniform(log_weights: torch.Tensor, temperature: torch.Tensor, uniform: torch.Tensor):
    """``resample_indices`` given ``U[0, 1)`` draws ``[E, N]``: the inverse of the weights' CDF (pure, compiles).

    Index ``i`` is returned for ``u`` in ``[cdf[i − 1], cdf[i])``, an interval as long as its weight, so a
    zero-weight particle is never chosen; the last CDF entry is set to exactly 1 against rounding.
    """
    cdf = (log_weights / temperature).softmax(-1).cumsum(-1)
    cdf = torch.cat([cdf[..., :-1], torch.ones_like(cdf[..., -1:])], -1)
    return torch.searchsorted(cdf, uniform.contiguous(), right=True).clamp_max(log_weights.shape[-1] - 1)


class GeneratorDraws:
    """Draws taken from ``generator`` at the moment the search needs them (the order fixes the stream)."""

    def __init__(self, generator: torch.Generator | None) -> None:
        self.generator = generator

    def dirichlet(self, logits: torch.Tensor, alpha: float) -> torch.Tensor:
        return gamma_sample(torch.full_like(logits, alpha), self.generator)

    def perturbation(self, action: torch.Tensor) -> torch.Tensor:
        return torch.randn(action.shape, generator=self.generator, device=action.device, dtype=action.dtype)

    def root(self, prior: ActorCriticPrior, params: PolicyParams) -> torch.Tensor:
        return prior.sample(params, self.generator)

    def step(self, env: TorchEnv, depth: int, state: TensorDict, action: torch.Tensor, inplace: bool = False):
        return env.step_state(state, action, self.generator, inplace=inplace)

    def proposal(self, prior: ActorCriticPrior, depth: int, params: PolicyParams) -> torch.Tensor:
        return prior.sample(params, self.generator)

    def resample(self, depth: int, log_weights: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
        return resample_indices(log_weights, temperature, self.generator)

    def readout(self, logits: torch.Tensor) -> torch.Tensor:
        return D.categorical_sample(logits, self.generator)


@dataclass
class NoiseDraws:
    """Every draw of one search, as tensors (``E`` envs, ``N`` particles, ``h`` = depth, ``A``/``D`` = actions).

    Attributes:
        dirichlet: Gamma(α) draws ``[E, A]`` of the discrete root noise.
        perturbation: ``N(0, 1)`` ``[E·N, D]`` of the continuous root noise.
        root: the root actions' noise ``[E·N, A]`` (``U[0, 1)``, Gumbel-max) or ``[E·N, D]`` (``N(0, 1)``).
        proposals: the same per depth ``[max(h − 1, 1), E·N, ...]`` (the last depth proposes nothing).
        env: the env's ``step_noise`` ``[max(h, 1), E·N, ...]``.
        resample: ``U[0, 1)`` ``[max(h, 1), E, N]``.
        readout: ``U[0, 1)`` ``[E, N]``.
    """

    dirichlet: torch.Tensor
    perturbation: torch.Tensor
    root: torch.Tensor
    proposals: torch.Tensor
    env: torch.Tensor
    resample: torch.Tensor
    readout: torch.Tensor

    @staticmethod
    def draw(
        env: NoiseSteppedEnv,
        prior: ActorCriticPrior,
        num_envs: int,
        num_particles: int,
        depth: int,
        alpha: float,
        generator: torch.Generator,
    ) -> NoiseDraws:
        """All of one search's draws from ``generator`` (a few kernels, before the compiled search runs)."""
        rows, spec, device = num_envs * num_particles, prior.spec, generator.device
        width = spec.num_actions if spec.discrete else int(torch.Size(spec.action_shape).numel())

        def policy_noise(*lead: int) -> torch.Tensor:
            if spec.discrete:
                return torch.rand(*lead, width, generator=generator, device=device)
            return torch.randn(*lead, *spec.action_shape, generator=generator, device=device)

        return NoiseDraws(
            dirichlet=gamma_sample(torch.full((num_envs, width), alpha, device=device), generator),
            perturbation=torch.randn(rows, *spec.action_shape, generator=generator, device=device),
            root=policy_noise(rows),
            proposals=policy_noise(max(depth - 1, 1), rows),
            env=env.step_noise(generator, (max(depth, 1), rows)),
            resample=torch.rand(max(depth, 1), num_envs, num_particles, generator=generator, device=device),
            readout=torch.rand(num_envs, num_particles, generator=generator, device=device),
        )

    def as_dict(self) -> dict[str, torch.Tensor]:
        return dict(vars(self))


class NoiseSource:
    """The search's draws from a ``NoiseDraws`` (what ``GeneratorDraws`` is for a generator)."""

    def __init__(self, noise: NoiseDraws) -> None:
        self.noise = noise

    def dirichlet(self, logits: torch.Tensor, alpha: float) -> torch.Tensor:
        return self.noise.dirichlet

    def perturbation(self, action: torch.Tensor) -> torch.Tensor:
        return self.noise.perturbation

    def root(self, prior: ActorCriticPrior, params: PolicyParams) -> torch.Tensor:
        return prior.sample_from_noise(params, self.noise.root)

    def step(self, env: TorchEnv, depth: int, state: TensorDict, action: torch.Tensor):
        assert isinstance(env, NoiseSteppedEnv)
        return env.step_from_noise(state, action, self.noise.env[depth])

    def proposal(self, prior: ActorCriticPrior, depth: int, params: PolicyParams) -> torch.Tensor:
        return prior.sample_from_noise(params, self.noise.proposals[depth])

    def resample(self, depth: int, log_weights: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
        return resample_from_uniform(log_weights, temperature, self.noise.resample[depth])

    def readout(self, logits: torch.Tensor) -> torch.Tensor:
        return D.categorical_from_uniform(logits, self.noise.readout)
