"""``benchmarks/games/advantage_noise.py``: the exact noise of sampled advantages for each baseline, against the same
figures estimated from sampled games of Kuhn poker under a random policy (the naive reference)."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "games"))
import advantage_noise as an  # noqa: E402
import regularised_equilibrium as req  # noqa: E402


def _sampled_noise(game, tree: req.Tree, policy: list[np.ndarray], games: int, seed: int) -> dict[str, float]:
    """Play ``games`` games; estimate every value from the samples themselves, then each target's mean squared
    deviation from the estimated advantage over all sampled decisions."""
    rng = np.random.default_rng(seed)
    decisions = []  # (player, set, history, action, index of the player's next decision or -1, game's returns)
    for _ in range(games):
        state, played = game.new_initial_state(), []
        while not state.is_terminal():
            if state.is_chance_node():
                outcomes, probs = zip(*state.chance_outcomes())
                state.apply_action(outcomes[rng.choice(len(outcomes), p=probs)])
                continue
            player = state.current_player()
            infoset = tree.infoset_index[state.information_state_string(player)]
            action = rng.choice(len(policy[infoset]), p=policy[infoset])
            played.append((player, infoset, state.history_str(), action))
            state.apply_action(state.legal_actions()[action])
        returns = state.returns()
        start = len(decisions)
        for k, (player, infoset, history, action) in enumerate(played):
            later = [start + j for j in range(k + 1, len(played)) if played[j][0] == player]
            decisions.append((player, infoset, history, action, later[0] if later else -1, returns[player]))
    sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0])
    for player, infoset, history, action, _, g in decisions:
        for key in (("v_set", infoset), ("q", infoset, action), ("v_state", history, player)):
            sums[key][0] += g
            sums[key][1] += 1
    mean = {key: total / count for key, (total, count) in sums.items()}
    squares = defaultdict(float)
    for player, infoset, history, action, later, g in decisions:
        exact = mean[("q", infoset, action)] - mean[("v_set", infoset)]
        v_set, v_state = mean[("v_set", infoset)], mean[("v_state", history, player)]
        next_set = g if later < 0 else mean[("v_set", decisions[later][1])]
        next_state = g if later < 0 else mean[("v_state", decisions[later][2], player)]
        squares["mc_info"] += (g - v_set - exact) ** 2
        squares["mc_full"] += (g - v_state - exact) ** 2
        squares["td0_info"] += (next_set - v_set - exact) ** 2
        squares["td0_full"] += (next_state - v_state - exact) ** 2
    return {target: float(np.sqrt(total / len(decisions))) for target, total in squares.items()}


def test_exact_noise_matches_sampled_games() -> None:
    game = pyspiel.load_game("kuhn_poker")
    tree = req.Tree(game)
    rng = np.random.default_rng(1)
    policy = [rng.dirichlet(np.ones(len(actions))) for actions in tree.infoset_actions]  # no symmetry to hide behind
    noise, visits = an.advantage_noise(tree, policy)
    exact = {target: an.rms(noise[target], visits) for target in an.TARGETS}
    sampled = _sampled_noise(game, tree, policy, games=40_000, seed=2)
    for target in an.TARGETS:
        assert exact[target] == pytest.approx(sampled[target], rel=0.03), target
    assert exact["mc_full"] < exact["mc_info"]  # valuing the hidden card removes its luck
    assert len({round(v, 3) for v in exact.values()}) == 4  # four different quantities, not one computed four times


def test_reach_buckets_split_the_decisions() -> None:
    tree = req.Tree(pyspiel.load_game("kuhn_poker"))
    policy = [np.full(len(a), 1.0 / len(a)) for a in tree.infoset_actions]
    noise, visits = an.advantage_noise(tree, policy)
    assert visits.sum() == pytest.approx(2.25)  # 2 decisions per game, a third after check-bet (1 game in 4)
    inside = [(visits >= lo) & (visits < hi) for lo, hi in an.BUCKETS]
    assert sum(int(b.sum()) for b in inside) == len(visits)
