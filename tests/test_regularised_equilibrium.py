"""``benchmarks/games/regularised_equilibrium.py``: the exact regularised equilibrium that bounds a uniform magnet's
exploitability. Its action values against a recursive reference over OpenSpiel states, and its fixed point."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "games"))
import regularised_equilibrium as req  # noqa: E402


def _reference_q(game, policy: dict[str, np.ndarray], alpha: float) -> dict[str, np.ndarray]:
    """q by recursion over states: each history's regularised child values, summed over the information set with the
    opponent's and chance's reach as weights."""
    sums: dict[str, np.ndarray] = {}
    weights: dict[str, float] = {}

    def value(state, reach: tuple[float, float]) -> np.ndarray:
        if state.is_terminal():
            return np.array(state.returns())
        if state.is_chance_node():
            return sum(p * value(state.child(a), (reach[0] * p, reach[1] * p)) for a, p in state.chance_outcomes())
        player = state.current_player()
        key = state.information_state_string(player)
        pi = policy[key]
        children = []
        for i, action in enumerate(state.legal_actions()):
            child_reach = list(reach)
            child_reach[1 - player] *= pi[i]  # the opponent's view of this node includes this player's move
            children.append(value(state.child(action), (child_reach[0], child_reach[1])))
        # reach[p] here is everything but p's own moves (chance and the opponent)
        sums[key] = sums.get(key, 0.0) + reach[player] * np.array([c[player] for c in children])
        weights[key] = weights.get(key, 0.0) + reach[player]
        total = sum(p * c for p, c in zip(pi, children))
        total[player] -= alpha * float(np.sum(pi * np.log(pi * len(pi))))
        return total

    value(game.new_initial_state(), (1.0, 1.0))
    return {key: sums[key] / weights[key] for key in sums}


def _random_policy(tree: req.Tree, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.dirichlet(np.ones(len(actions))) for actions in tree.infoset_actions]


@pytest.mark.parametrize("game_name", ["kuhn_poker", "leduc_poker"])
def test_action_values_match_recursive_reference(game_name: str) -> None:
    tree = req.Tree(pyspiel.load_game(game_name))
    policy = _random_policy(tree, 0)
    q = req.action_values(tree, policy, alpha=0.3)
    by_key = {key: policy[i] for key, i in tree.infoset_index.items()}
    reference = _reference_q(tree.game, by_key, alpha=0.3)
    assert set(reference) == set(tree.infoset_index)
    for key, index in tree.infoset_index.items():
        np.testing.assert_allclose(q[index], reference[key], rtol=1e-10, atol=1e-10)


def test_equilibrium_is_the_logit_fixed_point_and_its_exploitability_falls_with_the_weight() -> None:
    tree = req.Tree(pyspiel.load_game("kuhn_poker"))
    floors = []
    policy = None
    for alpha in (1.0, 0.3, 0.1):
        policy, change = req.regularised_equilibrium(tree, alpha, step=0.3, iterations=2000, start=policy)
        assert change < 1e-8
        q = req.action_values(tree, policy, alpha)
        for pi, qi in zip(policy, q):  # π(I) ∝ uniform · exp(q(I) / α)
            logit = np.exp((qi - qi.max()) / alpha)
            np.testing.assert_allclose(pi, logit / logit.sum(), atol=1e-6)
        floors.append(req.exploitability(tree, policy))
    uniform = req.exploitability(tree, [np.full(len(a), 1.0 / len(a)) for a in tree.infoset_actions])
    assert uniform > floors[0] > floors[1] > floors[2] > 0.0
    assert math.isclose(uniform, 0.4583333, rel_tol=1e-5)  # Kuhn's uniform policy: NashConv 11/12, halved


def test_the_diagnosis_reads_entropy_in_nats_with_zero_probabilities_left_out():
    assert req._entropy(np.full(3, 1 / 3)) == pytest.approx(math.log(3))
    assert req._entropy(np.array([1.0, 0.0])) == 0.0
    assert req._entropy(np.array([0.25, 0.75])) == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))


def _own_gaps(capsys, tree, policy, equilibrium, alpha) -> list[float]:
    """The diagnosis's last column (distance to softmax(own values / weight)) for every reach bucket it prints."""
    req.diagnose(tree, policy, equilibrium, alpha)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| [")]
    return [float(line.rstrip(" |").rsplit("|", 1)[1]) for line in rows]


def test_the_diagnosis_measures_each_set_against_its_regularised_response_to_its_own_values(capsys):
    tree = req.Tree(pyspiel.load_game("kuhn_poker"))
    equilibrium, change = req.regularised_equilibrium(tree, 0.3, step=0.3, iterations=2000)
    assert change < 1e-8
    assert max(_own_gaps(capsys, tree, equilibrium, equilibrium, 0.3)) < 1e-6  # the fixed point answers itself
    uniform = [np.full(len(a), 1.0 / len(a)) for a in tree.infoset_actions]
    assert max(_own_gaps(capsys, tree, uniform, equilibrium, 0.3)) > 0.1
