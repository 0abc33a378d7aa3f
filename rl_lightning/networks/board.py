"""A convolutional encoder for board-game planes: ``[C, H, W]`` float (or int) observations such as OpenSpiel's
``connect_four`` observation tensor ``[3, 6, 7]`` (seat 0's pieces, seat 1's, empty) or ``tic_tac_toe``'s
``[3, 3, 3]``.

Unlike the pixel CNNs (``networks/cnn.py``) it takes the planes as the env gives them, channels first, without
scaling (0/1 planes), and keeps the board's size: ``layers`` 3×3 convolutions with padding 1 (``channels`` each,
ReLU), then a linear layer to ``out_dim`` features (ReLU). A 3×3 kernel sees a piece's neighbours; three layers see
a 7×7 window, the span of a four-in-a-row through any cell of a Connect Four board. Layers start orthogonal with
gain √2 and zero bias, as the other encoders.

A board encoder is chosen by name (``encoder: board``) for every rank-3 observation that is not a ``uint8`` image
(``networks/encoders.py``); a config may name it per observation key.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from rl_lightning.networks.cnn import orthogonal_init_


class BoardEncoder(nn.Module):
    """Board planes ``[..., C, H, W]`` → float features ``[..., out_dim]``.

    Args:
        shape: one observation's shape ``(C, H, W)``, planes first.
        channels: convolution channels.
        layers: 3×3 convolutions (padding 1: the board keeps its size).
        out_dim: features out of the final linear layer.
    """

    def __init__(self, shape: Sequence[int], channels: int = 32, layers: int = 3, out_dim: int = 256) -> None:
        super().__init__()
        if len(shape) != 3:
            raise ValueError(f"BoardEncoder takes [C, H, W] planes, got an observation of shape {tuple(shape)}")
        self.shape = tuple(int(s) for s in shape)
        planes, height, width = self.shape
        convs: list[nn.Module] = []
        for index in range(layers):
            convs += [nn.Conv2d(planes if index == 0 else channels, channels, 3, padding=1), nn.ReLU()]
        inner = channels if layers else planes
        self.trunk = orthogonal_init_(nn.Sequential(
            *convs, nn.Flatten(), nn.Linear(inner * height * width, out_dim), nn.ReLU(),
        ))  # fmt: skip
        self.out_dim = int(out_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[: obs.dim() - 3]
        return self.trunk(obs.reshape(-1, *self.shape).float()).reshape(*lead, self.out_dim)


def is_board(shape: Sequence[int], dtype: torch.dtype, classes: int = 0) -> bool:
    """Planes a ``BoardEncoder`` takes: a rank-3 observation that is not a ``uint8`` image nor a ``Discrete``."""
    return len(shape) == 3 and dtype != torch.uint8 and classes == 0
