"""Which observation keys DreamerV3's CNN and MLP take, as its official (2024) code decides them.

Every rank-3 leaf goes to the CNN, every other leaf to the MLP (``reward``/``is_first``/... are not observations
here, so no exclusion list is needed). The CNN keys are concatenated on the channel axis in sorted key order into
one ``uint8`` ``[C, H, W]`` image (channels-last keys moved to channels-first first, by the layout rule of
``networks/cnn.py``); they must share ``H`` and ``W``. A single-array rank-3 observation is the one CNN key.
"""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning.envs.base import EnvSpec, ObsLeaf
from rl_lightning.errors import ConfigError
from rl_lightning.networks.cnn import channels_last, chw
from rl_lightning.networks.encoders import leaf_name


def split_keys(spec: EnvSpec) -> tuple[list[tuple[tuple[str, ...], ObsLeaf]], EnvSpec | None]:
    """``(CNN leaves in sorted key order, the spec of the MLP leaves or None)``; one-line errors for bad images."""
    leaves = spec.obs_leaves()
    cnn = sorted(((key, leaf) for key, leaf in leaves if len(leaf.shape) == 3), key=lambda item: item[0])
    if not spec.obs_keys:  # a single array: a CNN image or an MLP vector
        return cnn, None if cnn else spec
    for key, leaf in cnn:
        if leaf.dtype != torch.uint8:
            raise ConfigError(
                f"DreamerV3: observation key {leaf_name(key)!r} is a rank-3 {leaf.dtype} array and rank-3 keys go to "
                "its CNN, which takes uint8 images (0-255); convert it to uint8 or flatten it to a vector"
            )
    sizes = {chw(leaf.shape)[1:] for _, leaf in cnn}
    if len(sizes) > 1:
        shapes = {leaf_name(key): tuple(leaf.shape) for key, leaf in cnn}
        raise ConfigError(f"DreamerV3: image keys {shapes} differ in H, W; its CNN stacks them on channels")
    mlp = tuple((key, leaf) for key, leaf in leaves if len(leaf.shape) != 3)
    return cnn, dataclasses.replace(spec, obs_keys=mlp) if mlp else None


class StackImages(nn.Module):
    """The CNN keys of an observation → one ``uint8`` ``[..., C, H, W]`` image (dtype kept: the CNN scales it).

    Args:
        leaves: the CNN leaves from ``split_keys``; ``[((), leaf)]`` for a single-array image.
    """

    def __init__(self, leaves: list[tuple[tuple[str, ...], ObsLeaf]]) -> None:
        super().__init__()
        self.keys = [key for key, _ in leaves]
        self.last = [channels_last(leaf.shape) and bool(key) for key, leaf in leaves]
        channels = sum(chw(leaf.shape)[0] if key else leaf.shape[0] for key, leaf in leaves)
        first_key, first = leaves[0]
        self.shape = (channels, *(chw(first.shape)[1:] if first_key else first.shape[1:]))

    def forward(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        if self.keys == [()]:
            return obs  # type: ignore[return-value]
        parts = [obs[key].movedim(-1, -3) if last else obs[key] for key, last in zip(self.keys, self.last, strict=True)]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-3)
