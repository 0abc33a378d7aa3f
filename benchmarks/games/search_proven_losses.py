"""How often ``NetworkMCTS`` plays a move its own search proved lost while another move is open (issue 34 item 1).

Every non-terminal tic-tac-toe position with more than one legal move, one search each (a uniform prior, or a sharp
prior fixed per position: ``3 · N(0, 1)`` logits seeded by the board; leaf value 0 either way): the count of
positions whose move is proven lost (by the same search, checked against full minimax) while some move is not,
under the rule before issue 34 (the most visited move, proofs unread) and the rule now (``NetworkMCTS._choose``:
among ``unrefuted`` moves). Both are read from the same trees.

    python benchmarks/games/search_proven_losses.py --simulations 8 16 32 64
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyspiel  # noqa: E402
import torch  # noqa: E402

from rl_lightning.games.search import NetworkMCTS  # noqa: E402

GAME = pyspiel.load_game("tic_tac_toe")


@functools.cache
def value(history: tuple[int, ...]) -> float:
    """Seat 0's result under perfect play."""
    state = GAME.new_initial_state()
    for action in history:
        state.apply_action(action)
    if state.is_terminal():
        return state.returns()[0]
    values = [value((*history, action)) for action in state.legal_actions()]
    return max(values) if state.current_player() == 0 else min(values)


def positions() -> list[Any]:
    found: dict[str, Any] = {}
    stack = [GAME.new_initial_state()]
    while stack:
        state = stack.pop()
        if state.is_terminal() or str(state) in found:
            continue
        found[str(state)] = state
        for action in state.legal_actions():
            child = state.clone()
            child.apply_action(action)
            stack.append(child)
    return [state for state in found.values() if len(state.legal_actions()) > 1]


def sharp_prior(obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rows = [np.random.default_rng(zlib.crc32(row.numpy().tobytes())).normal(0.0, 3.0, mask.shape[1]) for row in obs]
    return torch.tensor(np.stack(rows)).float().masked_fill(~mask, -1e9), torch.zeros(len(obs))


def proven_lost(root: Any) -> set[int]:
    lost = set()
    for index, child in enumerate(root.children):
        if child is not None and child.solved is not None:
            exact = value(tuple(child.state.history()))
            if child.solved != [exact, -exact]:
                raise AssertionError(f"a proof disagrees with minimax at {child.state.history()}")
            if child.solved[root.player] < 0:
                lost.add(index)
    return lost


def most_visited(root: Any) -> int:
    """The move before issue 34 at an unsolved root (ties: the higher mean, then the lower index)."""
    mean = [total / count if count else -math.inf for total, count in zip(root.value_sum, root.counts, strict=True)]
    return max(range(len(root.legal)), key=lambda i: (root.counts[i], mean[i], -i))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simulations", nargs="+", type=int, default=[8, 16, 32, 64])
    args = parser.parse_args()
    states = positions()
    print(f"{len(states)} positions; a proven-lost move played while another was open:")
    print("| prior | simulations | before issue 34 | now |\n|---|---|---|---|")
    for name, evaluator in (("uniform", None), ("sharp", sharp_prior)):
        for simulations in args.simulations:
            bot = NetworkMCTS(simulations=simulations, evaluator=evaluator)
            roots = bot.search(states)
            moves = bot._choose(roots, torch.Generator()).tolist()
            before = now = 0
            for root, move in zip(roots, moves, strict=True):
                lost = proven_lost(root)
                if root.solved is None and len(lost) < len(root.legal):
                    before += most_visited(root) in lost
                    now += root.legal.index(move) in lost
            print(f"| {name} | {simulations} | {before} | {now} |")


if __name__ == "__main__":
    main()
