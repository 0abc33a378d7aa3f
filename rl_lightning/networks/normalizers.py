"""Observation and reward normalisers as ``nn.Module``s: their statistics are buffers, so they travel in
``state_dict`` and checkpoints with the weights (docs/reference/envs.md).

Semantics follow Stable-Baselines3's ``VecNormalize`` (envs.md §4): observations become
``clip((obs - mean) / sqrt(var + eps), ±clip)``; rewards are divided by ``sqrt(var + eps)`` of the running
variance of each env's discounted return (no mean subtraction), then clipped. Statistics start at mean 0, var 1
and a pseudo-count of ``1e-4`` and merge batches with the parallel-variance formula (Chan et al., 1979), so the
result does not depend on how the data was split into batches.

Differences from ``VecNormalize``: statistics change only through an explicit ``update`` call (once per
rollout, from training collection), never inside ``forward``; an ``update`` in ``eval()`` mode is a no-op, as
BatchNorm's running statistics freeze in eval. Under ``torch.distributed`` every ``update`` pools the batch
moments of all ranks first, so every rank holds the same statistics (each rank must call ``update`` equally
often, as the on-policy loop does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from tensordict import TensorDict
from torch import nn

from rl_lightning.errors import ConfigError

if TYPE_CHECKING:  # networks sit beside envs in the layering: only the spec's type is needed here
    from rl_lightning.envs.base import EnvSpec

#: Pseudo-count of the prior (mean 0, var 1) the statistics start from (SB3's ``RunningMeanStd`` epsilon).
PRIOR_COUNT = 1e-4


def is_image(shape: Sequence[int], dtype: torch.dtype) -> bool:
    """Pixels (``uint8`` with >= 3 dims, e.g. ``[C, H, W]``) are left to the encoder, never normalised."""
    return dtype == torch.uint8 and len(shape) >= 3


def _sum_over_ranks(tensor: torch.Tensor) -> torch.Tensor:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


class RunningMeanStd(nn.Module):
    """Running mean and (population) variance of samples of shape ``shape``, in float64 buffers.

    Args:
        shape: shape of one sample; ``update`` reduces over every leading dim.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: Sequence[int] = ()) -> None:
        super().__init__()
        self.shape = tuple(shape)
        self.register_buffer("mean", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(self.shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(PRIOR_COUNT, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the samples ``x`` (``[..., *shape]``, pooled over all ranks) into the statistics.

        Two passes (sum, then squared deviations from the pooled batch mean) keep the variance accurate; an
        empty batch leaves the statistics unchanged. No-op in ``eval()`` mode.
        """
        if not self.training:
            return
        x = x.reshape(-1, *self.shape).to(self.mean.dtype)
        count_and_sum = torch.cat([x.new_full((1,), x.shape[0]), x.sum(0).reshape(-1)])
        _sum_over_ranks(count_and_sum)
        count = count_and_sum[0]
        batch_mean = (count_and_sum[1:] / count.clamp_min(1.0)).reshape(self.shape)
        squares = _sum_over_ranks((x - batch_mean).square().sum(0))
        self.merge(batch_mean, squares / count.clamp_min(1.0), count)

    @torch.no_grad()
    def merge(self, batch_mean: torch.Tensor, batch_var: torch.Tensor, batch_count: torch.Tensor) -> None:
        """Chan's parallel-variance merge of a batch's moments (population variance) into the statistics."""
        total = self.count + batch_count
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * batch_count + delta.square() * self.count * batch_count / total
        self.mean.add_(delta * batch_count / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)


class ObservationNormalizer(nn.Module):
    """``clip((obs - mean) / sqrt(var + eps), ±clip)`` as float32, for one vector observation key.

    Image observations (see ``is_image``) pass through unchanged and ``update`` ignores them.

    Args:
        shape: shape of one observation.
        dtype: the observation dtype (decides whether it is an image).
        clip: bound on the normalised values (``None``: no clipping).
        eps: added to the variance before the square root.
    """

    def __init__(
        self, shape: Sequence[int], dtype: torch.dtype = torch.float32, clip: float | None = 10.0, eps: float = 1e-8
    ) -> None:
        super().__init__()
        self.clip = clip
        self.eps = eps
        self.rms = None if is_image(shape, dtype) else RunningMeanStd(shape)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.rms is None:
            return obs
        # In float64 as the statistics: a float32 ``obs - mean`` cancels badly for large offsets and small stds.
        normalized = (obs.to(self.rms.mean.dtype) - self.rms.mean) * (self.rms.var + self.eps).rsqrt()
        if self.clip is not None:
            normalized = normalized.clamp(-self.clip, self.clip)
        return normalized.float()

    def update(self, obs: torch.Tensor) -> None:
        """Add observations ``[..., *shape]`` (raw, as the env returned them) to the statistics."""
        if self.rms is not None:
            self.rms.update(obs)


class DictObservationNormalizer(nn.Module):
    """One ``ObservationNormalizer`` per key of a (nested) TensorDict observation; image keys pass through.

    Args:
        specs: ``{key: (shape, dtype)}``; nested keys as tuples, e.g. ``("robot", "joints")``.
        clip: as ``ObservationNormalizer``.
        eps: as ``ObservationNormalizer``.
    """

    def __init__(
        self,
        specs: Mapping[str | tuple[str, ...], tuple[Sequence[int], torch.dtype]],
        clip: float | None = 10.0,
        eps: float = 1e-8,
    ) -> None:
        super().__init__()
        self.keys = list(specs)
        self.normalizers = nn.ModuleDict(
            {_module_name(key): ObservationNormalizer(shape, dtype, clip, eps) for key, (shape, dtype) in specs.items()}
        )

    def forward(self, obs: TensorDict) -> TensorDict:
        out = obs.clone(recurse=False)
        for key in self.keys:
            out.set(key, self.normalizers[_module_name(key)](obs.get(key)))
        return out

    def update(self, obs: TensorDict) -> None:
        for key in self.keys:
            self.normalizers[_module_name(key)].update(obs.get(key))


def _module_name(key: str | tuple[str, ...]) -> str:
    # ModuleDict names may not contain "."; "/" cannot occur in a TensorDict key part either.
    return "/".join((key,) if isinstance(key, str) else key)


class RewardScaler(nn.Module):
    """Scales rewards by the running std of each env's discounted return: ``clip(r / sqrt(var + eps), ±clip)``.

    ``update`` runs the per-env return accumulator ``acc = γ·acc + r`` over a rollout (zeroed after any
    ``terminated | truncated`` step, as SB3's ``VecNormalize``; Gymnasium's single-env ``NormalizeReward``
    resets on ``terminated`` only) and merges every accumulated value into the variance. It is also zeroed
    before any row flagged ``is_first`` that no done row announced: an env that restarted its episode, as
    Gymnasium backends do on resume (their state is not checkpointed) while the restored accumulator still
    holds the old episode's return. The accumulator is rank-local collection state, not a buffer (DDP broadcasts
    buffers from rank 0): read and restore it with ``returns``.

    Args:
        gamma: discount of the accumulated return (the algorithm's γ).
        clip: bound on the scaled reward (``None``: no clipping).
        eps: added to the variance before the square root.
    """

    def __init__(self, gamma: float, clip: float | None = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.gamma = gamma
        self.clip = clip
        self.eps = eps
        self.rms = RunningMeanStd(())
        self.returns: torch.Tensor | None = None  # [num_envs] float64, carried from rollout to rollout

    def forward(self, reward: torch.Tensor) -> torch.Tensor:
        scaled = reward * (self.rms.var + self.eps).rsqrt().to(reward.dtype)
        return scaled if self.clip is None else scaled.clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, reward: torch.Tensor, done: torch.Tensor, is_first: torch.Tensor | None = None) -> None:
        """Accumulate a time-major rollout's rewards ``[T, B]`` into the statistics.

        Args:
            reward: ``[T, B]`` raw rewards.
            done: bool ``[T, B]``, ``terminated | truncated``: the accumulator restarts after these rows.
            is_first: bool ``[T, B]``, rows that start an episode: the accumulator restarts before them.
        """
        if not self.training:
            return
        acc = self.returns
        if acc is None or acc.shape != reward.shape[1:]:  # first rollout, or another number of envs
            acc = torch.zeros(reward.shape[1:], dtype=torch.float64, device=reward.device)
        acc = acc.to(reward.device)
        accumulated = []
        for t in range(reward.shape[0]):
            if is_first is not None:
                acc = acc.masked_fill(is_first[t], 0.0)
            acc = acc * self.gamma + reward[t]
            accumulated.append(acc)
            acc = acc.masked_fill(done[t], 0.0)
        self.returns = acc
        # An empty rollout still takes part in the cross-rank reduction, so no rank waits for it.
        self.rms.update(torch.stack(accumulated) if accumulated else acc.new_zeros((0,)))

    def returns_per_rank(self) -> list[torch.Tensor | None]:
        """Every rank's return accumulator on CPU, index = rank (call on all ranks: it gathers)."""
        local = None if self.returns is None else self.returns.cpu()
        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return [local]
        gathered: list[torch.Tensor | None] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, local)
        return gathered

    def load_returns_per_rank(self, per_rank: list[torch.Tensor | None]) -> None:
        """Restore this rank's accumulator from ``returns_per_rank``'s list; restart at 0 if ranks differ."""
        distributed = dist.is_available() and dist.is_initialized()
        world, rank = (dist.get_world_size(), dist.get_rank()) if distributed else (1, 0)
        self.returns = per_rank[rank] if len(per_rank) == world else None


def observation_normalizer(spec: EnvSpec, clip: float | None = 10.0) -> nn.Module:
    """The observation normaliser for an env: one per vector key of a ``Dict`` observation, else one for the array.

    ``Discrete`` observations (indices, one-hot inside the network) and images are not normalised.
    """
    if not spec.obs_keys:
        if spec.obs_classes:
            raise ConfigError(
                f"normalize_obs=True: {spec.name} has Discrete observations (one-hot inside the network, nothing to "
                "normalise); set normalize_obs false"
            )
        return ObservationNormalizer(spec.obs_shape, spec.obs_dtype, clip)
    leaves = {key: (leaf.shape, leaf.dtype) for key, leaf in spec.obs_keys if not leaf.classes}
    return DictObservationNormalizer(leaves, clip)
