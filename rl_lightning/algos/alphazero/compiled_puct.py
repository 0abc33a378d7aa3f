"""``PUCTSearch``'s search (``puct.py``), with its trees in arrays and its tree work compiled, for the grid games the
kernels of ``grid_games.py`` play (Connect Four, tic-tac-toe).

The Python search spends over half of a Connect Four self-play step walking ``Node`` objects and cloning ``pyspiel``
states; here each simulation is one compiled descent over every tree (PUCT's choice, a new node played by the
kernels, a finished game's result backed up and proven), one batched network forward of the leaves, and one
compiled expansion and backup. It makes the same choices in the same order with the same float64 arithmetic, so
its visit counts, values and proofs equal the Python search's exactly (``tests/test_alphazero_compiled.py`` checks
that over random positions, with and without root noise, network and uniform priors): the Python search stays the
reference, this one its fast form. ``search`` returns ``NodeView`` roots, which read as ``Node`` roots do
(``visit_targets``, ``unrefuted``, ``root_values``, ``tree_positions``, ``NetworkMCTS``'s choice).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch

from rl_lightning.algos.alphazero.grid_games import (
    GridGame,
    board_of,
    is_legal,
    landing_cell,
    makes_line,
    njit,
    write_observation,
)


class NodeView:
    """A node of a compiled tree as the readers of ``Node`` trees see it: ``player``, ``legal``, ``counts``,
    ``value_sum``, ``visits``, ``prior`` (None until evaluated), ``value``, ``solved`` (every seat's result, or None),
    ``children`` (None where unvisited) and ``state`` (a ``pyspiel`` state, replayed from the root's). Each is read
    from the arrays the first time it is asked for, so a reader pays only for what it reads (``visit_targets`` the
    root and its children; ``tree_positions`` the whole tree)."""

    __slots__ = ("_node", "_row", "_state_of", "_trees", "children", "counts", "legal", "player", "prior", "solved",
                 "state", "value", "value_sum", "visits")  # fmt: skip

    def __init__(self, trees: _Trees, row: int, node: int, state_of: Callable[[], Any]) -> None:
        self._trees, self._row, self._node, self._state_of = trees, row, node, state_of

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in NodeView.__slots__:
            raise AttributeError(name)
        value = self._read(name)
        setattr(self, name, value)
        return value

    def _read(self, name: str) -> Any:
        trees, row, node = self._trees, self._row, self._node
        if name == "player":
            return int(trees.player[row, node])
        if name == "legal":  # none at a finished game, whose legal row was never set
            return np.flatnonzero(trees.legal[row, node]).tolist()
        if name == "solved":
            return _per_seat(trees, row, node)
        if name == "state":
            return self._state_of()
        if name == "prior" and not trees.expanded[row, node]:
            return None
        if name in ("counts", "value_sum", "prior"):
            return getattr(trees, name)[row, node, self.legal].tolist()
        if name == "visits":
            return int(trees.visits[row, node])
        if name == "value":
            return float(trees.value[row, node])
        children: list[NodeView | None] = []
        for action in self.legal:
            kid = int(trees.child[row, node, action])
            children.append(None if kid < 0 else NodeView(trees, row, kid, partial(_played, self, action)))
        return children


def _played(parent: NodeView, action: int) -> Any:
    """``parent``'s state after ``action`` (a new ``pyspiel`` state)."""
    state = parent.state.clone()
    state.apply_action(action)
    return state


class _Trees:
    """The arrays of ``trees`` search trees of at most ``nodes`` nodes each (node 0 the root)."""

    def __init__(self, trees: int, nodes: int, grid: GridGame) -> None:
        actions = grid.num_actions
        self.board = np.zeros((trees, nodes, grid.cells), dtype=np.int8)
        self.player = np.full((trees, nodes), -1, dtype=np.int8)  # the seat to move; -1 at a finished game
        self.moves = np.zeros((trees, nodes), dtype=np.int32)
        self.legal = np.zeros((trees, nodes, actions), dtype=np.bool_)
        self.expanded = np.zeros((trees, nodes), dtype=np.bool_)  # the network has set its prior
        self.solved = np.zeros((trees, nodes), dtype=np.bool_)
        self.result = np.zeros((trees, nodes), dtype=np.float64)  # seat 0's result where solved (seat 1's: -it)
        self.prior = np.zeros((trees, nodes, actions), dtype=np.float64)
        self.value = np.zeros((trees, nodes), dtype=np.float64)  # the leaf evaluation's value for its mover
        self.counts = np.zeros((trees, nodes, actions), dtype=np.int64)
        self.value_sum = np.zeros((trees, nodes, actions), dtype=np.float64)
        self.visits = np.zeros((trees, nodes), dtype=np.int64)
        self.child = np.full((trees, nodes, actions), -1, dtype=np.int32)
        self.size = np.ones(trees, dtype=np.int32)
        self.path_node = np.zeros((trees, nodes), dtype=np.int32)
        self.path_action = np.zeros((trees, nodes), dtype=np.int32)
        self.path_length = np.zeros(trees, dtype=np.int32)

    def kernel_arrays(self) -> tuple[np.ndarray, ...]:
        """The arrays in the order the kernels take them."""
        return (self.board, self.player, self.moves, self.legal, self.expanded, self.solved, self.result,
                self.prior, self.value, self.counts, self.value_sum, self.visits, self.child, self.size,
                self.path_node, self.path_action, self.path_length)  # fmt: skip


def compiled_search(
    search: Any,
    engine_states: list[Any],
    grid: GridGame,
    root_noise: tuple[float, float, np.random.Generator] | None,
) -> list[NodeView]:
    """``search``'s (a ``PUCTSearch``) trees over ``engine_states``, grown by the kernels; the roots as views."""
    count = len(engine_states)
    trees = _Trees(count, search.simulations + 1, grid)
    for row, state in enumerate(engine_states):
        if state.is_terminal():
            raise ValueError("the compiled search was given a finished game; search live states only")
        trees.board[row, 0] = board_of(state, grid)
        trees.player[row, 0] = state.current_player()
        trees.moves[row, 0] = len(state.history())
        for action in state.legal_actions():
            trees.legal[row, 0, action] = True
    arrays = trees.kernel_arrays()
    shape = (grid.rows, grid.cols, grid.in_row, grid.gravity, np.array(grid.planes, dtype=np.int8))
    obs = np.zeros((count, 3 * grid.cells), dtype=np.float32)
    mask = np.zeros((count, grid.num_actions), dtype=np.bool_)
    leaf_tree = np.arange(count, dtype=np.int32)
    leaf_node = np.zeros(count, dtype=np.int32)
    for row in range(count):
        write_observation(trees.board[row, 0], shape[4], obs[row])
    mask[:] = trees.legal[:, 0]
    evaluate = _leaf_evaluation(search.evaluator, obs, mask, (3, grid.rows, grid.cols))
    _expand(count, leaf_tree, leaf_node, *evaluate(count), search.evaluator is None, *arrays)
    if root_noise is not None:
        _mix_root_noise(trees, root_noise)
    best = float(engine_states[0].get_game().max_utility())
    for _ in range(search.simulations):
        pending = _descend(count, search.c_puct, best, *shape, *arrays, leaf_tree, leaf_node, obs, mask)
        if pending:
            _expand(pending, leaf_tree, leaf_node, *evaluate(pending), search.evaluator is None, *arrays)
    return [NodeView(trees, row, 0, state.clone) for row, state in enumerate(engine_states)]


def _leaf_evaluation(
    evaluator: Callable[..., Any] | None, obs: np.ndarray, mask: np.ndarray, obs_shape: tuple[int, ...]
) -> Callable[[int], tuple[np.ndarray, np.ndarray]]:
    """``pending -> (probs [pending, A] float64, values [pending] float64)`` of the first ``pending`` leaves written
    to ``obs`` / ``mask``, as the Python search computes them (float32 softmax of the masked logits, widened)."""

    def evaluate(pending: int) -> tuple[np.ndarray, np.ndarray]:
        if evaluator is None:
            return np.zeros((pending, mask.shape[1])), np.zeros(pending)
        logits, value = evaluator(torch.from_numpy(obs[:pending]).view(pending, *obs_shape),
                                  torch.from_numpy(mask[:pending]))  # fmt: skip
        probs = torch.softmax(logits.float(), -1).cpu().numpy().astype(np.float64)
        return probs, value.float().cpu().numpy().astype(np.float64)

    return evaluate


def _mix_root_noise(trees: _Trees, root_noise: tuple[float, float, np.random.Generator]) -> None:
    """``(1 − fraction)·P + fraction·Dir(alpha)`` at each root, drawn root by root as ``PUCTSearch`` draws them."""
    alpha, fraction, rng = root_noise
    for row in range(trees.prior.shape[0]):
        legal = np.flatnonzero(trees.legal[row, 0])
        if len(legal):
            noise = rng.dirichlet([alpha] * len(legal))
            trees.prior[row, 0, legal] = (1.0 - fraction) * trees.prior[row, 0, legal] + fraction * noise


def _per_seat(trees: _Trees, row: int, node: int) -> list[float] | None:
    if not trees.solved[row, node]:
        return None
    result = float(trees.result[row, node])
    return [result, 0.0 - result]


@njit(cache=True)
def _numpy_sum(values: np.ndarray, n: int) -> float:
    """``values[:n].sum()`` in numpy's own order (pairwise: 8 running sums from 8 terms on), so the normalised prior
    equals the Python search's bit for bit."""
    if n < 8:
        total = 0.0
        for i in range(n):
            total += values[i]
        return total
    partial = values[:8].copy()
    i = 8
    while i < n - n % 8:
        for j in range(8):
            partial[j] += values[i + j]
        i += 8
    low = (partial[0] + partial[1]) + (partial[2] + partial[3])
    high = (partial[4] + partial[5]) + (partial[6] + partial[7])
    total = low + high
    while i < n:
        total += values[i]
        i += 1
    return total


@njit(cache=True)
def _select(c_puct, t, node, legal, prior, counts, value_sum, visits):  # noqa: ANN001, ANN202
    """PUCT's choice at ``node`` (the lowest action among equal scores), as ``tree.Node.select``."""
    scale = c_puct * math.sqrt(max(visits[t, node], 1))
    best, best_score = -1, -math.inf
    for action in range(legal.shape[2]):
        if not legal[t, node, action]:
            continue
        count = counts[t, node, action]
        mean = value_sum[t, node, action] / count if count else 0.0
        score = mean + scale * prior[t, node, action] / (1 + count)
        if best < 0 or score > best_score:
            best, best_score = action, score
    return best


@njit(cache=True)
def _prove(t, node, best, player, legal, solved, result, child) -> bool:  # noqa: ANN001
    """MCTS-Solver at ``node`` (``tree.proven``): proven by a child giving its mover ``best``, or by every child
    being solved (the mover's best of them, the first among equals). Sets ``solved`` / ``result``."""
    mover = player[t, node]
    for action in range(legal.shape[2]):
        kid = child[t, node, action]
        if legal[t, node, action] and kid >= 0 and solved[t, kid]:
            mine = result[t, kid] if mover == 0 else 0.0 - result[t, kid]
            if mine >= best:
                solved[t, node], result[t, node] = True, result[t, kid]
                return True
    chosen, chosen_value = -1, -math.inf
    for action in range(legal.shape[2]):
        if not legal[t, node, action]:
            continue
        kid = child[t, node, action]
        if kid < 0 or not solved[t, kid]:
            return False
        mine = result[t, kid] if mover == 0 else 0.0 - result[t, kid]
        if chosen < 0 or mine > chosen_value:
            chosen, chosen_value = kid, mine
    solved[t, node], result[t, node] = True, result[t, chosen]
    return True


@njit(cache=True)
def _backup(t, first_seat_value, second_seat_value, proving, best, player, legal, solved, result, counts,  # noqa: ANN001
            value_sum, visits, child, path_node, path_action, path_length) -> None:  # fmt: skip
    """``tree.backup`` along tree ``t``'s path: every edge gets the value of the seat that moved, proofs go up."""
    for step in range(path_length[t] - 1, -1, -1):
        node, action = path_node[t, step], path_action[t, step]
        counts[t, node, action] += 1
        value_sum[t, node, action] += first_seat_value if player[t, node] == 0 else second_seat_value
        visits[t, node] += 1
        if proving:
            proving = _prove(t, node, best, player, legal, solved, result, child)


@njit(cache=True)
def _play(t, node, action, rows, cols, in_row, gravity, board, player, moves, legal, solved, result, size,  # noqa: ANN001
          child) -> int:  # fmt: skip
    """The child of ``node`` after ``action``, made: its board, mover, legal moves, or its result if finished."""
    kid = size[t]
    size[t] += 1
    child[t, node, action] = kid
    board[t, kid] = board[t, node]
    seat = player[t, node]
    cell = landing_cell(board[t, kid], action, rows, cols, gravity)
    board[t, kid, cell] = seat + 1
    moves[t, kid] = moves[t, node] + 1
    if makes_line(board[t, kid], cell, rows, cols, in_row):
        solved[t, kid], result[t, kid] = True, 1.0 if seat == 0 else -1.0
    elif moves[t, kid] == rows * cols:
        solved[t, kid], result[t, kid] = True, 0.0
    else:
        player[t, kid] = 1 - seat
        for move in range(legal.shape[2]):
            legal[t, kid, move] = is_legal(board[t, kid], move, rows, cols, gravity)
    return kid


@njit(cache=True)
def _descend(trees, c_puct, best, rows, cols, in_row, gravity, planes, board, player, moves, legal,  # noqa: ANN001, ANN202
             expanded, solved, result, prior, value, counts, value_sum, visits, child, size, path_node, path_action,
             path_length, leaf_tree, leaf_node, obs, mask):  # fmt: skip
    """One simulation of every tree (``PUCTSearch._simulate``'s loop body): descend by PUCT to a finished game (backed
    up and proven at once) or to an unevaluated node (written to ``obs`` / ``mask`` as the next leaf). Returns the
    number of leaves."""
    pending = 0
    for t in range(trees):
        node, depth = 0, 0
        while not solved[t, node] and expanded[t, node]:
            action = _select(c_puct, t, node, legal, prior, counts, value_sum, visits)
            path_node[t, depth], path_action[t, depth] = node, action
            depth += 1
            kid = child[t, node, action]
            if kid < 0:
                kid = _play(t, node, action, rows, cols, in_row, gravity, board, player, moves, legal, solved,
                            result, size, child)  # fmt: skip
            node = kid
        path_length[t] = depth
        if solved[t, node]:
            _backup(t, result[t, node], 0.0 - result[t, node], depth > 0, best, player, legal, solved, result,
                    counts, value_sum, visits, child, path_node, path_action, path_length)  # fmt: skip
        else:
            leaf_tree[pending], leaf_node[pending] = t, node
            write_observation(board[t, node], planes, obs[pending])
            mask[pending] = legal[t, node]
            pending += 1
    return pending


@njit(cache=True)
def _expand(pending, leaf_tree, leaf_node, probs, values, uniform, board, player, moves, legal, expanded,  # noqa: ANN001
            solved, result, prior, value, counts, value_sum, visits, child, size, path_node, path_action,
            path_length) -> None:  # fmt: skip
    """Set each pending leaf's prior (its legal moves' probabilities, normalised) and value, and back the value up
    its path (``PUCTSearch._evaluate``)."""
    gathered = np.empty(legal.shape[2], dtype=np.float64)
    for i in range(pending):
        t, node = leaf_tree[i], leaf_node[i]
        n = 0
        for action in range(legal.shape[2]):
            if legal[t, node, action]:
                gathered[n] = probs[i, action]
                n += 1
        total = _numpy_sum(gathered, n)
        for action in range(legal.shape[2]):
            if legal[t, node, action]:
                prior[t, node, action] = 1.0 / n if uniform else probs[i, action] / total
        expanded[t, node] = True
        mover = player[t, node]
        value[t, node] = values[i]
        other = -values[i]
        first, second = (values[i], other) if mover == 0 else (other, values[i])
        _backup(t, first, second, False, 1.0, player, legal, solved, result, counts, value_sum, visits, child,
                path_node, path_action, path_length)  # fmt: skip
