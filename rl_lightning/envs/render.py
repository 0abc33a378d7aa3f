"""Batched rgb drawing in torch for the torch envs' ``render_rgb``: a canvas, shapes as pixel masks, paint.

Everything is tensor ops on the state's device (no pygame, no host sync): a shape is a boolean mask
``[B, H, W]`` computed from the pixel-centre grid, and painting it is one ``torch.where``. Coordinates are
in pixels with ``y`` pointing up (as the classic-control renderers draw before they flip the image).
"""

from __future__ import annotations

import torch

WHITE = (255, 255, 255)
BLACK = (0, 0, 0)


def canvas(batch: int, height: int, width: int, device: torch.device) -> torch.Tensor:
    """A white uint8 ``[batch, height, width, 3]`` image."""
    return torch.full((batch, height, width, 3), 255, dtype=torch.uint8, device=device)


def pixel_grid(height: int, width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Pixel-centre coordinates ``(x [1, 1, W], y [1, H, 1])``, ``y`` measured up from the bottom edge."""
    x = torch.arange(width, device=device, dtype=torch.float32) + 0.5
    y = height - (torch.arange(height, device=device, dtype=torch.float32) + 0.5)
    return x.view(1, 1, width), y.view(1, height, 1)


def paint(image: torch.Tensor, mask: torch.Tensor, colour: tuple[int, int, int]) -> torch.Tensor:
    """``image`` with the pixels where ``mask`` ``[B, H, W]`` is True set to ``colour``."""
    fill = torch.tensor(colour, dtype=torch.uint8, device=image.device)
    return torch.where(mask.unsqueeze(-1), fill, image)


def column(value: torch.Tensor) -> torch.Tensor:
    """A per-row ``[B]`` value shaped ``[B, 1, 1]`` to broadcast against the pixel grid."""
    return value.to(torch.float32).view(-1, 1, 1)


def capsule(
    x: torch.Tensor, y: torch.Tensor, start: tuple[torch.Tensor, torch.Tensor], end: tuple[torch.Tensor, torch.Tensor],
    radius: float,
) -> torch.Tensor:  # fmt: skip
    """Pixels within ``radius`` of the segment ``start -> end`` (per-row ``[B]`` endpoints): a rod with round ends."""
    ax, ay = column(start[0]), column(start[1])
    dx, dy = column(end[0]) - ax, column(end[1]) - ay
    t = (((x - ax) * dx + (y - ay) * dy) / (dx.square() + dy.square()).clamp_min(1e-6)).clamp(0.0, 1.0)
    return (x - ax - t * dx).square() + (y - ay - t * dy).square() <= radius**2


def disc(x: torch.Tensor, y: torch.Tensor, cx: float, cy: float, radius: float) -> torch.Tensor:
    """Pixels within ``radius`` of the fixed point ``(cx, cy)``: ``[1, H, W]``."""
    return (x - cx).square() + (y - cy).square() <= radius**2
