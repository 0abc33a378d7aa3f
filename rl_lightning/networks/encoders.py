"""Observation encoders: whatever the env contract carries under ``obs`` → one float feature vector.

Observations keep their dtype in every store (``uint8``, ``int32``, ``float64``, int64 ``Discrete`` indices); this
is where they are converted, at the start of the network. ``ObsEncoder`` builds one encoder per observation leaf
of an ``EnvSpec`` (the single array, or each key of a ``Dict`` observation, nested keys included) and concatenates
their outputs in the spec's key order, as SB3's ``CombinedExtractor`` does:

* a vector (``Box``) leaf is flattened and cast to float32 (identity-concat into the MLP trunk that follows);
* a ``Discrete(n)`` leaf becomes a one-hot of width ``n``.

Image leaves (rank-3 ``Box`` keys of a ``Dict``) are the seam for the pixels issue: ``leaf_encoder`` is where a CNN
per image key goes; until then the spec conversion refuses them. None of these encoders has parameters, so adding
one to a module changes neither its ``state_dict`` nor its initialisation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning.networks.distributions import one_hot

if TYPE_CHECKING:  # networks sit beside envs in the layering: only the spec's type is needed here
    from rl_lightning.envs.base import EnvSpec, ObsLeaf


class FlattenFloat(nn.Module):
    """A ``[..., *shape]`` array → ``[..., prod(shape)]`` float32 (any input dtype)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = tuple(shape)
        self.out_dim = int(torch.Size(self.shape).numel())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.reshape(*obs.shape[: obs.dim() - len(self.shape)], -1).float()


class OneHot(nn.Module):
    """A ``Discrete(n)`` observation ``[...]`` (int64 index) → one-hot ``[..., n]`` float32 (no host sync)."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.out_dim = int(classes)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return one_hot(obs.long(), self.out_dim)


def leaf_encoder(leaf: ObsLeaf) -> nn.Module:
    """The encoder of one observation leaf (the seam where image leaves will get a CNN)."""
    if leaf.classes > 0:
        return OneHot(leaf.classes)
    return FlattenFloat(leaf.shape)


class ObsEncoder(nn.Module):
    """An ``obs`` tensor or TensorDict (``Dict`` observations) → float features ``[..., out_dim]``.

    Args:
        spec: the env's spec; its ``obs_leaves`` decide the per-key encoders and their order.
    """

    def __init__(self, spec: EnvSpec) -> None:
        super().__init__()
        leaves = spec.obs_leaves()
        self.keys = [key for key, _ in leaves]
        self.encoders = nn.ModuleList([leaf_encoder(leaf) for _, leaf in leaves])
        self.out_dim = sum(encoder.out_dim for encoder in self.encoders)

    def forward(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        parts = [enc(obs if key == () else obs[key]) for key, enc in zip(self.keys, self.encoders, strict=True)]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
