"""The rules of OpenSpiel's ``connect_four`` and ``tic_tac_toe`` as compiled kernels over a flat board, for the
compiled PUCT search (``compiled_puct.py``), which plays its trees' moves without ``pyspiel`` states.

Both are k-in-a-row games on a grid: two seats place stones in turn (seat 0 first), a line of ``in_row`` stones of
one seat wins (+1 to it, -1 to the other), a full board without one is a draw (0). Connect Four drops a stone into a
column (``gravity``: the action is the column, the stone lands on the lowest empty cell); tic-tac-toe places it on
the cell the action names. A board is ``int8 [rows * cols]``: 0 empty, 1 seat 0, 2 seat 1, row-major in the rows
of OpenSpiel's observation tensor (Connect Four's row 0 is the bottom one). ``write_observation`` writes that
tensor, ``[3, rows, cols]``, one plane per cell state in the order OpenSpiel gives them (``GridGame.planes``); the
tests check boards, results and tensors against ``pyspiel`` over random games.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

try:
    from numba import njit
except ImportError:  # the search refuses to run uncompiled (``PUCTSearch.compiled_grid``); the rules still import

    def njit(**_: Any) -> Any:
        return lambda function: function


@dataclass(frozen=True)
class GridGame:
    """A k-in-a-row grid game the kernels play: its shape, rule and observation layout."""

    rows: int
    cols: int
    in_row: int
    gravity: bool  # the action names a column (Connect Four), else a cell
    planes: tuple[int, int, int]  # the observation plane of an empty cell, a stone of seat 0, of seat 1

    @property
    def cells(self) -> int:
        return self.rows * self.cols

    @property
    def num_actions(self) -> int:
        return self.cols if self.gravity else self.cells


def grid_game_of(game: Any) -> GridGame | None:
    """The kernels' description of a ``pyspiel.Game``, or None for a game (or setting) they do not play."""
    name = game.get_type().short_name
    params = game.get_parameters()
    if name == "connect_four" and not params.get("egocentric_obs_tensor", False):
        return GridGame(int(params["rows"]), int(params["columns"]), int(params["x_in_row"]), True, (2, 0, 1))
    if name == "tic_tac_toe" and not params:
        return GridGame(3, 3, 3, False, (0, 2, 1))
    return None


@njit(cache=True)
def landing_cell(board: np.ndarray, action: int, rows: int, cols: int, gravity: bool) -> int:
    """The cell a stone played by ``action`` occupies (the lowest empty one of its column under ``gravity``)."""
    if not gravity:
        return action
    for row in range(rows):
        if board[row * cols + action] == 0:
            return row * cols + action
    return -1


@njit(cache=True)
def is_legal(board: np.ndarray, action: int, rows: int, cols: int, gravity: bool) -> bool:
    """Whether ``action`` may be played on ``board`` (a column with room, or an empty cell)."""
    if gravity:
        return board[(rows - 1) * cols + action] == 0
    return board[action] == 0


@njit(cache=True)
def makes_line(board: np.ndarray, cell: int, rows: int, cols: int, in_row: int) -> bool:
    """Whether the stone on ``cell`` lies on a line of ``in_row`` or more stones of its seat."""
    stone = board[cell]
    row, col = cell // cols, cell % cols
    for d_row, d_col in ((0, 1), (1, 0), (1, 1), (1, -1)):
        count = 1
        for sign in (1, -1):
            r, c = row + sign * d_row, col + sign * d_col
            while 0 <= r < rows and 0 <= c < cols and board[r * cols + c] == stone:
                count += 1
                r += sign * d_row
                c += sign * d_col
        if count >= in_row:
            return True
    return False


@njit(cache=True)
def write_observation(board: np.ndarray, planes: np.ndarray, out: np.ndarray) -> None:
    """OpenSpiel's observation tensor of ``board``, flat (``[3 * cells]``), into ``out``."""
    cells = board.shape[0]
    out[:] = 0.0
    for cell in range(cells):
        out[planes[board[cell]] * cells + cell] = 1.0


def board_of(state: Any, grid: GridGame) -> np.ndarray:
    """The board of a ``pyspiel.State`` of ``grid``'s game, replayed from its move history."""
    board = np.zeros(grid.cells, dtype=np.int8)
    for move, action in enumerate(state.history()):
        cell = landing_cell(board, action, grid.rows, grid.cols, grid.gravity)
        board[cell] = 1 + move % 2
    return board
