"""DreamerV3's action distributions (dreamer.md §4) and the env ↔ model action mapping.

The model always sees actions in a fixed format: a one-hot for ``Discrete(n)``, a vector in ``[-1, 1]`` for boxes.
The env gets an index, or the box vector rescaled to its bounds and clipped (the ``bounded_normal`` sample is not
squashed, so clipping is the env side's job).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rl_lightning.envs.base import EnvSpec
from rl_lightning.networks import distributions as D
from rl_lightning.networks.mlp import flat_size


@dataclass
class PolicyOutput:
    """One policy evaluation: the model-format action, its log-prob and the distribution's entropy."""

    action: torch.Tensor
    log_prob: torch.Tensor
    entropy: torch.Tensor


class ActionSpace:
    """Maps between env actions and the model's action format, and evaluates the actor's distribution.

    Args:
        spec: the env's spec.
        unimix: uniform mix of the categorical policy (0.01 in DreamerV3).
        min_std: lower bound of the bounded-normal std (0.1).
        max_std: upper bound of the bounded-normal std (1.0).
    """

    def __init__(self, spec: EnvSpec, unimix: float = 0.01, min_std: float = 0.1, max_std: float = 1.0) -> None:
        self.discrete = spec.discrete
        self.dim = spec.num_actions if spec.discrete else flat_size(spec.action_shape)
        self.action_shape = spec.action_shape
        self.unimix = unimix
        self.min_std, self.max_std = min_std, max_std
        self._low = torch.tensor(spec.action_low, dtype=torch.float32)
        self._high = torch.tensor(spec.action_high, dtype=torch.float32)

    @property
    def head_dim(self) -> int:
        """Width of the actor's output layer."""
        return self.dim if self.discrete else 2 * self.dim

    def to_model(self, env_action: torch.Tensor) -> torch.Tensor:
        """Env actions ``[...]``/``[..., *shape]`` → model format ``[..., dim]`` (float)."""
        if self.discrete:
            return D.one_hot(env_action.long(), self.dim)
        low, high = self._bounds(env_action.device)
        flat = env_action.reshape(*env_action.shape[: env_action.dim() - len(self.action_shape)], self.dim)
        return ((flat - low) / (high - low) * 2.0 - 1.0).clamp(-1.0, 1.0)

    def to_env(self, model_action: torch.Tensor) -> torch.Tensor:
        """Model-format actions → what ``env.step`` takes (an index, or the clipped, rescaled box)."""
        if self.discrete:
            return model_action.argmax(-1)
        low, high = self._bounds(model_action.device)
        scaled = low + (model_action.clamp(-1.0, 1.0) + 1.0) * 0.5 * (high - low)
        return scaled.reshape(*model_action.shape[:-1], *self.action_shape)

    def _bounds(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._low.device != device:
            self._low, self._high = self._low.to(device), self._high.to(device)
        return self._low, self._high

    def log_probs(self, out: torch.Tensor) -> torch.Tensor:
        """Categorical log-probabilities with the uniform mix (discrete heads only)."""
        return D.unimix_logits(out, self.unimix)

    def _normal(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean_raw, std_raw = out.chunk(2, dim=-1)
        std = (self.max_std - self.min_std) * torch.sigmoid(std_raw + 2.0) + self.min_std
        return torch.tanh(mean_raw), std.log()

    def sample(self, out: torch.Tensor, generator: torch.Generator | None, deterministic: bool = False) -> torch.Tensor:
        """A model-format action from the actor output ``out`` (mode when ``deterministic``); no gradient."""
        out = out.detach()
        if self.discrete:
            logp = self.log_probs(out)
            index = logp.argmax(-1) if deterministic else D.categorical_sample(logp, generator)
            return D.one_hot(index, self.dim, out.dtype)
        mean, log_std = self._normal(out)
        return mean if deterministic else D.normal_sample(mean, log_std, generator)

    def draw_noise(
        self, shape: tuple[int, ...], generator: torch.Generator, device: torch.device, dtype: torch.dtype
    ) -> torch.Tensor:
        """What ``sample`` draws for actions of batch ``shape``: ``U[0, 1)`` (discrete) or ``N(0, 1)`` (box), in the
        same order from ``generator``, so ``sample_from_noise`` on it gives ``sample``'s action bit for bit."""
        draw = torch.rand if self.discrete else torch.randn
        return draw((*shape, self.dim), generator=generator, device=device, dtype=dtype)

    def sample_from_noise(self, out: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """``sample`` given its draws (``draw_noise``): pure, so it compiles."""
        out = out.detach()
        if self.discrete:
            index = D.categorical_from_uniform(self.log_probs(out), noise)
            return D.one_hot(index, self.dim, out.dtype)
        mean, log_std = self._normal(out)
        return D.normal_from_noise(mean, log_std, noise)

    def evaluate(self, out: torch.Tensor, action: torch.Tensor) -> PolicyOutput:
        """Log-prob of ``action`` (model format) and entropy under the actor output ``out`` (differentiable)."""
        if self.discrete:
            logp = self.log_probs(out)
            return PolicyOutput(action, (logp * action).sum(-1), -(logp.exp() * logp).sum(-1))
        mean, log_std = self._normal(out)
        return PolicyOutput(action, D.normal_log_prob(mean, log_std, action), D.normal_entropy(log_std))
