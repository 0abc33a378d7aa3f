"""The search's view of the agent: the prior policy π_θ(·|s) that proposes actions and the critic V_φ(s)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import EnvSpec
from rl_lightning.networks import distributions as D
from rl_lightning.networks.encoders import ObsEncoder

Network = Callable[[torch.Tensor], torch.Tensor]
Encoder = Callable[[torch.Tensor | TensorDict], torch.Tensor]
PolicyParams = tuple[torch.Tensor, ...]  # discrete: (masked logits [B, A],); continuous: (mean, std), each [B, D]

MIN_STD = 1e-3  # scale = softplus(·) + 1e-3, as Stoix's NormalAffineTanhDistributionHead
_GAMMA_PROPOSALS = 16  # Marsaglia–Tsang tries per draw; P(all rejected) < 1e-20 for shape >= 1


def gaussian_head(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split an actor output ``[..., 2D]`` into the pre-tanh ``(mean, std)`` of the tanh-squashed Normal."""
    mean, pre_std = out.chunk(2, dim=-1)
    return mean, F.softplus(pre_std) + MIN_STD


class ActorCriticPrior:
    """Proposal and bootstrap networks for SMC search, for discrete (masked) or box actions.

    Args:
        actor: flat features ``[B, F]`` → logits ``[B, A]`` (discrete) or ``[B, 2D]`` (mean, pre-softplus std).
        critic: flat features ``[B, F]`` → ``[B, 1]`` or ``[B]`` state values.
        spec: the env's spec (action space, bounds, observation leaves).
        encoder: observation (tensor, or TensorDict of ``Dict`` keys) → flat float features of the actor; default
            ``ObsEncoder(spec)``.
        normalizer: applied to raw observations before the encoder (frozen here: only read).
        critic_encoder: the critic's own encoder (``None``: the critic shares ``encoder``).
    """

    def __init__(
        self,
        actor: Network,
        critic: Network,
        spec: EnvSpec,
        encoder: Encoder | None = None,
        normalizer: Network | None = None,
        critic_encoder: Encoder | None = None,
    ) -> None:
        self.actor = actor
        self.critic = critic
        self.spec = spec
        self.encoder = encoder if encoder is not None else ObsEncoder(spec)
        self.normalizer = normalizer
        self.critic_encoder = self.encoder if critic_encoder is None else critic_encoder
        self._bounds: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def normalized(self, obs: torch.Tensor | TensorDict) -> torch.Tensor | TensorDict:
        """Raw observations as every encoder sees them (through the frozen normaliser, if any)."""
        return obs if self.normalizer is None else self.normalizer(obs)

    def features(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        """The actor's input features of raw observations."""
        return self.encoder(self.normalized(obs))

    def critic_features(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        """The critic's input features of raw observations."""
        return self.critic_encoder(self.normalized(obs))

    def bounds(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(low, high)`` of the box action space as tensors on ``device`` (cached: no copy per step)."""
        if device not in self._bounds:
            shape = self.spec.action_shape
            low = torch.tensor(self.spec.action_low, device=device).reshape(shape)
            high = torch.tensor(self.spec.action_high, device=device).reshape(shape)
            self._bounds[device] = (low, high)
        return self._bounds[device]

    def params(self, obs: TensorDict) -> PolicyParams:
        out = self.actor(self.features(obs[keys.OBS])).float()  # float32 also under a bfloat16 autocast
        if self.spec.discrete:
            return (D.masked_logits(out, obs.get(keys.ACTION_MASK, None)),)
        return gaussian_head(out)

    def value(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        v = self.critic(self.critic_features(obs)).float()
        return v.squeeze(-1) if v.dim() > 1 else v

    def sample(self, params: PolicyParams, generator: torch.Generator | None) -> torch.Tensor:
        if self.spec.discrete:
            return D.categorical_sample(params[0], generator)
        low, high = self.bounds(params[0].device)
        return D.tanh_normal_sample(params[0], params[1], low, high, generator)

    def sample_from_noise(self, params: PolicyParams, noise: torch.Tensor) -> torch.Tensor:
        """``sample`` given its draws: ``U[0, 1)`` of the logits' shape (discrete) or ``N(0, 1)`` of the mean's."""
        if self.spec.discrete:
            return D.categorical_from_uniform(params[0], noise)
        low, high = self.bounds(params[0].device)
        return D.tanh_normal_from_noise(params[0], params[1], low, high, noise)

    def mode(self, params: PolicyParams) -> torch.Tensor:
        if self.spec.discrete:
            return params[0].argmax(-1)
        low, high = self.bounds(params[0].device)
        return D.tanh_normal_mode(params[0], low, high)

    @staticmethod
    def repeat(params: PolicyParams, n: int) -> PolicyParams:
        """Each row repeated ``n`` times, consecutively (row ``e`` becomes rows ``e·n … e·n + n − 1``)."""
        return tuple(p.repeat_interleave(n, dim=0) for p in params)

    def dirichlet_mix(
        self, logits: torch.Tensor, alpha: float, fraction: float, generator: torch.Generator | None
    ) -> torch.Tensor:
        """AlphaZero root noise on probabilities: p' = (1 − f)·p + f·Dir(α) over the legal actions; returns logits.

        Illegal actions (logit = dtype min) keep probability 0. Mixing on logits, as Stoix does, is not the
        AlphaZero mixture (spo.md §6.2).
        """
        return self.dirichlet_mix_with(logits, gamma_sample(torch.full_like(logits, alpha), generator), fraction)

    @staticmethod
    def dirichlet_mix_with(logits: torch.Tensor, gamma_draws: torch.Tensor, fraction: float) -> torch.Tensor:
        """``dirichlet_mix`` given its Gamma(α) draws (shape of ``logits``), normalised here over legal actions."""
        legal = logits > torch.finfo(logits.dtype).min
        noise = gamma_draws * legal
        noise = noise / noise.sum(-1, keepdim=True).clamp_min(torch.finfo(logits.dtype).tiny)
        mixed = (1.0 - fraction) * logits.softmax(-1) + fraction * noise
        return D.masked_logits(mixed.clamp_min(torch.finfo(mixed.dtype).tiny).log(), legal)

    def perturb(self, action: torch.Tensor, fraction: float, generator: torch.Generator | None) -> torch.Tensor:
        """Continuous root exploration: (1 − f)·a + f·ε with ε ~ N(0, 1), clipped to the action bounds."""
        noise = torch.randn(action.shape, generator=generator, device=action.device, dtype=action.dtype)
        return self.perturb_with(action, noise, fraction)

    def perturb_with(self, action: torch.Tensor, noise: torch.Tensor, fraction: float) -> torch.Tensor:
        """``perturb`` given its ``N(0, 1)`` draws (shape of ``action``)."""
        low, high = self.bounds(action.device)
        return torch.maximum(torch.minimum((1.0 - fraction) * action + fraction * noise, high), low)


def gamma_sample(shape: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Gamma(shape, 1) draws from an explicit generator (``torch.distributions`` cannot take one).

    Marsaglia & Tsang (2000) with a fixed number of vectorised proposals (no host sync), boosted by
    ``U^{1/a}`` for shapes below 1.
    """
    boosted = shape + (shape < 1).to(shape.dtype)
    d = boosted - 1.0 / 3.0
    c = 1.0 / (9.0 * d).sqrt()
    size = (_GAMMA_PROPOSALS, *shape.shape)
    x = torch.randn(size, generator=generator, device=shape.device, dtype=shape.dtype)
    u = torch.rand(size, generator=generator, device=shape.device, dtype=shape.dtype)
    v = (1.0 + c * x).pow(3)
    accept = (v > 0) & (u.clamp_min(1e-30).log() < 0.5 * x.square() + d - d * v + d * v.clamp_min(1e-30).log())
    first = accept.to(torch.int8).argmax(0, keepdim=True)  # first accepted proposal (0 if none: P < 1e-20)
    draw = (d * v).gather(0, first).squeeze(0)
    boost = torch.rand(shape.shape, generator=generator, device=shape.device, dtype=shape.dtype)
    return torch.where(shape < 1, draw * boost.clamp_min(1e-30).pow(1.0 / shape), draw)
