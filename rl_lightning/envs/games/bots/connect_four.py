"""A Connect Four baseline bot for OpenSpiel's and PettingZoo's observations.

Layouts: OpenSpiel ``connect_four`` ``observation_tensor`` ``[3, 6, 7]`` (planes: seat 0's pieces, seat 1's,
empty; row 0 is the bottom; the default ``egocentric_obs_tensor: false``), PettingZoo ``connect_four_v3``
``observation`` ``[6, 7, 2]`` (planes: the acting agent's pieces, the opponent's; row 0 is the top).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812

_ROWS, _COLS = 6, 7


def boards(obs: torch.Tensor, seat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mine, theirs)`` bool ``[B, 6, 7]`` with row 0 the bottom, from either layout."""
    if tuple(obs.shape[1:]) == (3, _ROWS, _COLS):  # OpenSpiel: plane p holds seat p's pieces
        rows = torch.arange(obs.shape[0], device=obs.device)
        mine, theirs = obs[rows, seat] > 0, obs[rows, 1 - seat] > 0
        return mine, theirs
    if tuple(obs.shape[1:]) == (_ROWS, _COLS, 2):  # PettingZoo: plane 0 is the acting agent's; row 0 the top
        flipped = obs.flip(1)
        return flipped[..., 0] > 0, flipped[..., 1] > 0
    raise ValueError(f"ConnectFourHeuristic reads [3, 6, 7] (OpenSpiel connect_four) or [6, 7, 2] (PettingZoo "
                     f"connect_four_v3) observations, got {tuple(obs.shape[1:])}")  # fmt: skip


def _line_kernels() -> torch.Tensor:
    kernels = torch.zeros(4, 1, 4, 4)
    kernels[0, 0, 0, :] = 1  # horizontal
    kernels[1, 0, :, 0] = 1  # vertical
    kernels[2, 0] = torch.eye(4)  # diagonal
    kernels[3, 0] = torch.eye(4).flip(1)  # anti-diagonal
    return kernels


def winning_columns(pieces: torch.Tensor, heights: torch.Tensor) -> torch.Tensor:
    """bool ``[B, 7]``: dropping a piece in that column completes four in a row for ``pieces`` ``[B, 6, 7]``."""
    batch = pieces.shape[0]
    cols = torch.arange(_COLS, device=pieces.device)
    after = pieces.unsqueeze(1).repeat(1, _COLS, 1, 1)  # [B, 7 candidate columns, 6, 7]
    landing = heights.clamp(max=_ROWS - 1)
    after[torch.arange(batch).unsqueeze(1), cols, landing, cols] = True
    padded = F.pad(after.reshape(batch * _COLS, 1, _ROWS, _COLS).float(), (3, 3, 3, 3))
    lines = F.conv2d(padded, _line_kernels().to(pieces.device))
    return (lines >= 4).flatten(1).any(-1).reshape(batch, _COLS) & (heights < _ROWS)


class ConnectFourHeuristic:
    """Win if a move wins now, else block the opponent's immediate win, else play closest to the centre.

    Deterministic (``generator`` is unused); ties go to the column nearest the centre, then the leftmost.
    """

    def __call__(
        self, obs: torch.Tensor, action_mask: torch.Tensor, seat: torch.Tensor, generator: torch.Generator
    ) -> torch.Tensor:
        mine, theirs = boards(obs, seat)
        heights = (mine | theirs).sum(1)  # [B, 7]
        cols = torch.arange(_COLS, device=obs.device)
        centre = 3.0 - (cols - 3).abs().float()
        score = (centre + 100.0 * winning_columns(theirs, heights) + 1000.0 * winning_columns(mine, heights)).float()
        return torch.where(action_mask, score, -1.0).argmax(-1)
