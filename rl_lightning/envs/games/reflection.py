"""The left-right reflection of a board game: a position and its mirror image are worth the same, with every move
mirrored, so a learner may train on either (AlphaZero's data augmentation by the board's symmetries; Silver et al.
2017 trained on a random one of Go's eight per position).

Known for OpenSpiel's ``connect_four`` (a move is a column) and ``tic_tac_toe`` (a move is a cell, row-major), both
with their default rules and the ``observation`` tensor ``[cell states, rows, columns]``: the reflection flips the
columns of every plane and maps column ``c`` to ``columns - 1 - c``. Other games (and other observations) have no
reflection here: ``board_reflection`` returns None for them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rl_lightning.envs.base import EnvSpec

_BOARD_GAMES = {"open_spiel:connect_four": "column", "open_spiel:tic_tac_toe": "cell"}


@dataclass(frozen=True)
class Reflection:
    """Index maps of one reflection: ``obs_index`` ``[D]`` gathers a flattened observation's entries into its
    mirror image, ``action_index`` ``[A]`` gathers per-move values (a mask, a policy) into the mirror's order; a
    reflection is its own inverse, so ``action_index`` also maps a move to its mirror."""

    obs_shape: tuple[int, ...]
    obs_index: torch.Tensor
    action_index: torch.Tensor

    def observations(self, obs: torch.Tensor) -> torch.Tensor:
        """``[..., *obs_shape]`` observations mirrored."""
        lead = obs.shape[: obs.dim() - len(self.obs_shape)]
        flat = obs.reshape(*lead, -1)
        return flat.index_select(-1, self.obs_index.to(obs.device)).reshape(obs.shape)

    def per_move(self, values: torch.Tensor) -> torch.Tensor:
        """``[..., A]`` values, one per move (a legal mask, a policy), in the mirror's move order."""
        return values.index_select(-1, self.action_index.to(values.device))

    def moves(self, actions: torch.Tensor) -> torch.Tensor:
        """Move ids (any shape) mirrored."""
        return self.action_index.to(actions.device)[actions]


def board_reflection(spec: EnvSpec) -> Reflection | None:
    """The left-right reflection of ``spec``'s game (the module docstring), or None where none is known."""
    moves = _BOARD_GAMES.get(spec.name)
    if moves is None or spec.game_params or len(spec.obs_shape) != 3:
        return None
    planes, rows, columns = spec.obs_shape
    grid = torch.arange(planes * rows * columns).reshape(planes, rows, columns)
    obs_index = grid.flip(-1).reshape(-1)
    if moves == "column":
        action_index = torch.arange(columns).flip(0)
    else:
        action_index = torch.arange(rows * columns).reshape(rows, columns).flip(-1).reshape(-1)
    if len(action_index) != spec.num_actions:
        return None
    return Reflection(tuple(spec.obs_shape), obs_index, action_index)
