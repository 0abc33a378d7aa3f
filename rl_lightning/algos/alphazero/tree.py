"""The tree of a PUCT search (``puct.py``): nodes holding a position's legal moves, prior, visits and values; the
backup of a leaf's values with MCTS-Solver proofs (Winands et al., 2008); and what is read off the roots once the
search is done: AlphaZero's policy targets (``visit_targets``), the moves no proof rules out (``unrefuted``), the
roots' values and further positions of the trees worth a target (``tree_positions``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


class Node:
    """One position of a search tree: its state, whose turn, and the statistics of its legal actions (plain lists:
    for a handful of actions a Python loop costs less than numpy's per-call overhead)."""

    __slots__ = ("children", "counts", "legal", "player", "prior", "solved", "state", "value", "value_sum", "visits")

    def __init__(self, state: Any) -> None:
        self.state = state
        terminal = state.is_terminal()
        #: Every seat's result under best play, once known: the game's returns at its end, or proven (``_prove``).
        self.solved: list[float] | None = state.returns() if terminal else None
        self.player = -1 if terminal else state.current_player()
        self.legal: list[int] = [] if terminal else state.legal_actions()
        self.prior: list[float] | None = None  # set when the network evaluates the node
        self.value = 0.0  # the leaf evaluation's value for ``player``, set with ``prior``
        self.counts = [0] * len(self.legal)
        self.value_sum = [0.0] * len(self.legal)
        self.visits = 0
        self.children: list[Node | None] = [None] * len(self.legal)

    def select(self, c_puct: float) -> int:
        """The index (into ``legal``) of the PUCT choice (ties: the lowest index)."""
        scale = c_puct * math.sqrt(max(self.visits, 1))
        best, best_score = 0, -math.inf
        for index, (count, total, prior) in enumerate(zip(self.counts, self.value_sum, self.prior, strict=True)):
            score = (total / count if count else 0.0) + scale * prior / (1 + count)
            if score > best_score:
                best, best_score = index, score
        return best

    def child(self, index: int) -> Node:
        node = self.children[index]
        if node is None:
            state = self.state.clone()
            state.apply_action(self.legal[index])
            node = self.children[index] = Node(state)
        return node


def backup(path: list[tuple[Node, int]], values: Any, best: float) -> None:
    """Add the leaf's per-seat ``values`` along ``path``: each edge gets the value of the seat that moved.

    A solved leaf proves its way up as far as it can (MCTS-Solver, Winands et al. 2008): a node is solved when a
    child gives its mover the game's ``best`` result, or when every child is solved (the mover's best of them).
    """
    proving = path and path[-1][0].children[path[-1][1]].solved is not None
    for node, index in reversed(path):
        node.counts[index] += 1
        node.value_sum[index] += values[node.player]
        node.visits += 1
        if proving:
            node.solved = proven(node, best)
            proving = node.solved is not None


def proven(node: Node, best: float) -> list[float] | None:
    """``node``'s result if its children prove it (a winning child, or all children solved), else None."""
    results = [child.solved if child is not None else None for child in node.children]
    mover = node.player
    if any(result is not None and result[mover] >= best for result in results):
        return next(result for result in results if result is not None and result[mover] >= best)
    if all(result is not None for result in results):
        return max(results, key=lambda result: result[mover])
    return None


def visit_targets(roots: list[Node], num_actions: int) -> np.ndarray:
    """``[len(roots), num_actions]``: AlphaZero's policy target of each root, its visit counts normalised, with the
    moves its proofs rule out given no mass.

    A move is ruled out when the mover has a proven better one: with a proven win, only the winning moves keep
    mass; a move proven lost is dropped while any other move is not proven lost; a proven result below another
    move's proven result is dropped. Without proofs the target is the visit distribution itself. Kept moves with no
    visits between them share the mass equally.
    """
    targets = np.zeros((len(roots), num_actions), dtype=np.float32)
    for row, root in enumerate(roots):
        keep = unrefuted(root)
        counts = np.array([root.counts[i] for i in keep], dtype=np.float64)
        weights = counts / counts.sum() if counts.sum() > 0 else np.full(len(keep), 1.0 / len(keep))
        targets[row, [root.legal[i] for i in keep]] = weights
    return targets


def unrefuted(root: Node) -> list[int]:
    """The indices (into ``root.legal``) of the moves no proof rules out, never empty: the rule of ``visit_targets``
    (AlphaZero's targets and its self-play moves) and of ``NetworkMCTS``'s move, so the searching player never plays
    a move its own search proved lost while another move is unproven or proven better."""
    mover = root.player
    results = [child.solved[mover] if child is not None and child.solved is not None else None
               for child in root.children]  # fmt: skip
    game = root.state.get_game()
    best, worst = game.max_utility(), game.min_utility()
    proven = [r for r in results if r is not None]
    guaranteed = max(proven) if proven else -math.inf
    all_lost = all(r is not None and r <= worst for r in results)
    return [
        index
        for index, result in enumerate(results)
        if (guaranteed < best if result is None else result >= guaranteed and (result > worst or all_lost))
    ]


def root_values(roots: list[Node]) -> np.ndarray:
    """``[len(roots)]``: each root's value for its mover after the search: its proven result where solved, else the
    visit-weighted mean of its moves' values (the search's estimate of the position; 0 for a root never expanded)."""
    values = np.zeros(len(roots), dtype=np.float32)
    for row, root in enumerate(roots):
        if root.solved is not None:
            values[row] = root.solved[root.player]
        elif root.visits:
            values[row] = sum(root.value_sum) / root.visits
    return values


def tree_positions(roots: list[Node], count: int, min_visits: int) -> list[list[Node]]:
    """Per root, up to ``count`` other positions of its tree worth a policy target: not finished, evaluated, and
    either searched at least ``min_visits`` times or solved (whose proofs alone rule moves out); solved ones first,
    then the most visited. Both seats' positions: the opponent's replies train the same network."""
    picked = []
    for root in roots:
        found, stack = [], [child for child in root.children if child is not None]
        while stack:
            node = stack.pop()
            if node.legal and node.prior is not None and (node.solved is not None or node.visits >= min_visits):
                found.append(node)
            stack.extend(child for child in node.children if child is not None)
        found.sort(key=lambda node: (node.solved is not None, node.visits), reverse=True)
        picked.append(found[:count])
    return picked
