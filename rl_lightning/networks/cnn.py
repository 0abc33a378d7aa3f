"""Convolutional encoders for pixel observations: the Nature DQN CNN and the IMPALA ResNet.

An image is a rank-3 ``uint8`` observation. Stores keep it exactly as the env returns it (``uint8``, the env's
layout); the encoder converts it once, on the device, at the start of its forward: channels-last frames
(``[H, W, C]``) are permuted to ``[C, H, W]`` (a view: PyTorch's convolutions take the channels-last stride as
is), then cast to float and divided by 255, as baselines, CleanRL and SB3 do inside the network.

Layout rule (decided once from the shape, as SB3's ``VecTransposeImage`` does): the channel axis is the smaller
of the two end axes, ties going to channels-first. So ``(4, 84, 84)`` and ``(3, 32, 32)`` are channels-first,
``(84, 84, 3)`` and ``(36, 36, 3)`` channels-last.

* ``nature`` (Mnih et al., 2015): conv 32@8×8 s4, 64@4×4 s2, 64@3×3 s1 (ReLU each), FC 512, ReLU. The three
  valid convolutions need ``H, W >= 36`` (84×84 gives the paper's 7×7×64).
* ``impala`` (Espeholt et al., 2018, the "large" net): three stages of 16, 32, 32 channels, each a 3×3 conv,
  a 3×3 stride-2 max-pool (padding 1) and two residual blocks ``x + conv(relu(conv(relu(x))))``; then ReLU, FC
  256, ReLU. Each stage halves H and W rounding up, so any size fits (64×64 gives CleanRL's 8×8×32).

The trunk runs channels-last (NHWC memory format, the same logical ``[N, C, H, W]`` shapes): faster on CPU.

Every convolution and linear layer starts orthogonal with gain √2 and zero bias (SB3's ``ortho_init`` of the
feature extractor; the policy and value heads after it get 0.01 and 1 where they are built).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

#: Smallest ``H`` and ``W`` each CNN takes (the IMPALA stages pad, so any image fits).
MIN_SIZE = {"nature": 36, "impala": 1}


def channels_last(shape: Sequence[int]) -> bool:
    """Whether a rank-3 image shape is ``[H, W, C]`` (its last axis is smaller than its first)."""
    return int(shape[-1]) < int(shape[0])


def chw(shape: Sequence[int]) -> tuple[int, int, int]:
    """A rank-3 image shape as ``(C, H, W)``, whatever its layout."""
    a, b, c = (int(s) for s in shape)
    return (c, a, b) if channels_last(shape) else (a, b, c)


def fits(name: str, shape: Sequence[int]) -> bool:
    """Whether the CNN ``name`` takes images of this (rank-3, either layout) shape."""
    _, height, width = chw(shape)
    return min(height, width) >= MIN_SIZE[name]


def orthogonal_init_(module: nn.Module, gain: float = math.sqrt(2.0)) -> nn.Module:
    """Orthogonal weights with ``gain`` and zero biases for every conv and linear layer inside ``module``."""
    for layer in module.modules():
        if isinstance(layer, nn.Conv2d | nn.Linear):
            nn.init.orthogonal_(layer.weight, gain)
            nn.init.zeros_(layer.bias)
    return module


class PixelEncoder(nn.Module):
    """``uint8`` images ``[..., *shape]`` → float features ``[..., out_dim]`` through a conv ``trunk``.

    Args:
        shape: one image's shape as the env returns it (channels-first or -last, see the module docstring).
        trunk: ``[N, C, H, W]`` float in ``[0, 1]`` → ``[N, out_dim]``.
        out_dim: the trunk's output width.
    """

    def __init__(self, shape: Sequence[int], trunk: nn.Module, out_dim: int) -> None:
        super().__init__()
        self.shape = tuple(int(s) for s in shape)
        self.channels_last = channels_last(self.shape)
        # Channels-last (NHWC) weights and inputs: oneDNN's convolutions, above all their backward, run ~1.7x
        # faster on CPU that way than in NCHW (Nature CNN on 256 Atari frames: 55 vs 90 ms per forward+backward).
        self.trunk = orthogonal_init_(trunk).to(memory_format=torch.channels_last)
        self.out_dim = int(out_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[: obs.dim() - 3]
        x = obs.reshape(-1, *self.shape)
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)  # already NHWC in memory: the next line copies nothing
        x = nhwc_frames(x)  # on the uint8 frames, 4x fewer bytes than after the cast; a no-op once staged
        return self.trunk(x.to(_input_dtype(x)).div_(255.0)).reshape(*lead, self.out_dim)

    def stage(self, obs: torch.Tensor) -> torch.Tensor:
        """A flat batch of frames ``[N, *shape]`` laid out in memory as ``forward`` reads it (NHWC), the same values
        and shape: an update that reads each frame in several minibatches lays them out once (``PPOUpdate.update``;
        a row gather keeps the layout), not once per minibatch."""
        if self.channels_last or obs.dim() != 4:
            return obs  # channels-last frames are NHWC in memory already; other shapes are laid out in ``forward``
        return nhwc_frames(obs)


def nhwc_frames(frames: torch.Tensor) -> torch.Tensor:
    """``[N, C, H, W]`` frames in channels-last memory (NHWC), values and shape unchanged; no copy if they are.
    Stacking the ``C`` planes is ~2x faster on the CPU than ``contiguous(memory_format=torch.channels_last)`` for
    ``uint8`` frames (4-frame 84x84 stacks: 1.3 against 2.2 ms per 256, 0.08 against 0.14 ms per 8)."""
    if frames.is_contiguous(memory_format=torch.channels_last):
        return frames
    return torch.stack(frames.unbind(1), dim=-1).permute(0, 3, 1, 2)


def _input_dtype(frames: torch.Tensor) -> torch.dtype:
    """float32, or autocast's low-precision dtype inside an autocast region (``trainer.precision: bf16-mixed``).
    Casting ``uint8`` straight to bfloat16 gives bit for bit the frames autocast's own cast of ``float32 / 255``
    would give the first convolution (0-255 are exact in bfloat16; the division rounds once either way), and skips
    a float32 copy of the batch (~4% of a Nature-CNN minibatch step on the CPU)."""
    device = frames.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else torch.float32


def nature_cnn(shape: Sequence[int], out_dim: int = 512) -> PixelEncoder:
    """The Nature DQN CNN for images of ``shape`` (``H, W >= 36``)."""
    channels, height, width = chw(shape)
    h, w = height, width
    for kernel, stride in ((8, 4), (4, 2), (3, 1)):
        h, w = (h - kernel) // stride + 1, (w - kernel) // stride + 1
    trunk = nn.Sequential(
        nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(64 * h * w, out_dim), nn.ReLU(),
    )  # fmt: skip
    return PixelEncoder(shape, trunk, out_dim)


class ResidualBlock(nn.Module):
    """``x + conv(relu(conv(relu(x))))`` with 3×3 convolutions that keep the channel count and size."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def impala_cnn(shape: Sequence[int], out_dim: int = 256, depths: Sequence[int] = (16, 32, 32)) -> PixelEncoder:
    """The IMPALA ResNet for images of ``shape`` (any size; each stage halves H and W, rounding up)."""
    channels, h, w = chw(shape)
    layers: list[nn.Module] = []
    for depth in depths:
        layers += [
            nn.Conv2d(channels, depth, 3, padding=1),
            nn.MaxPool2d(3, stride=2, padding=1),
            ResidualBlock(depth),
            ResidualBlock(depth),
        ]
        channels, h, w = depth, (h + 1) // 2, (w + 1) // 2
    layers += [nn.ReLU(), nn.Flatten(), nn.Linear(channels * h * w, out_dim), nn.ReLU()]
    return PixelEncoder(shape, nn.Sequential(*layers), out_dim)


#: The CNN builders a config can name (``encoder: nature | impala``).
CNNS = {"nature": nature_cnn, "impala": impala_cnn}
