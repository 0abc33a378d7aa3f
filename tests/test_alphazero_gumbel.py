"""Gumbel AlphaZero's search (``algos/alphazero/gumbel.py``): the root's sequential-halving schedule against
hand-worked cases and a naive phase-by-phase halving, ``σ(q̂)`` / ``π'`` and the interior choice against numpy
references, the move as a Gumbel-max sample of the prior, proofs and immediate wins, and the module's path: stored
targets are ``π'``, moves repeat under a seed, a CLI fit, one-line refusals."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

pytest.importorskip("pyspiel")

import pyspiel  # noqa: E402

from rl_lightning import keys  # noqa: E402
from rl_lightning.algos import AlphaZero  # noqa: E402
from rl_lightning.algos.alphazero import SEARCH_POLICY, GumbelSearch  # noqa: E402
from rl_lightning.algos.alphazero.gumbel import considered_visits, improved_policy, transformed_q  # noqa: E402
from rl_lightning.algos.alphazero.tree import Node, unrefuted  # noqa: E402
from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402
from rl_lightning.errors import ConfigError  # noqa: E402
from tests.cli_subprocess import ERROR_PREFIX, ROOT, run_cli  # noqa: E402
from tests.test_games_search import ttt_positions  # noqa: E402

C4 = pyspiel.load_game("connect_four")


def _c4(moves: list[int]):
    state = C4.new_initial_state()
    for move in moves:
        state.apply_action(move)
    return state


def _fixed(prior: list[float]):
    """An evaluator with the same prior everywhere (over 7 columns) and value 0."""
    logits = torch.log(torch.tensor(prior))

    def evaluate(obs, mask):
        return logits.expand(len(obs), -1).masked_fill(~mask, -1e9), torch.zeros(len(obs))

    return evaluate


@pytest.mark.parametrize(
    ("m", "n", "expected"),
    [(7, 8, [0] * 7 + [1]),
     (7, 16, [0] * 7 + [1] * 3 + [2, 2, 3, 3, 4, 4]),
     (16, 32, [0] * 16 + [1] * 8 + [2] * 4 + [3] * 4),
     (4, 12, [0] * 4 + [1, 1, 2, 2, 3, 3, 4, 4]),  # 2 phases: 12 // 8 = 1 round of 4, then rounds of 2 (12 // 4 = 3)
     (1, 5, [0, 1, 2, 3, 4])],
)  # fmt: skip
def test_the_roots_schedule_is_sequential_halving_worked_by_hand(m, n, expected):
    assert list(considered_visits(m, n)) == expected


def _naive_halving(scores: list[float], m: int, n: int) -> list[int]:
    """Sequential halving phase by phase (the paper's Algorithm 2 with fixed scores): the top ``m`` moves, each phase
    ``max(1, n // (⌈log2 m⌉ · |S|))`` visits to each move of S, then the better half of S kept (at least 2), until the
    budget is spent; the last phase stops part-way in the order of S."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    considered = order[:m]
    counts, spent = [0] * len(scores), 0
    phases = max(1, math.ceil(math.log2(m))) if m > 1 else 1
    while spent < n:
        rounds = max(1, n // (phases * len(considered)))
        for _ in range(rounds):
            for move in considered:
                if spent < n:
                    counts[move] += 1
                    spent += 1
        considered = considered[: max(2, len(considered) // 2)]
    return counts


@pytest.mark.parametrize(("m", "n", "seed"), [(7, 8, 0), (7, 16, 1), (7, 32, 2), (4, 24, 3), (3, 9, 4), (2, 10, 5)])
def test_the_roots_visits_follow_naive_sequential_halving_on_fixed_scores(m, n, seed):
    # Every leaf is worth 0, so every q and σ(q̂) is 0 and each move's score g + log π stays fixed.
    prior = np.random.default_rng(seed).dirichlet([1.0] * 7).tolist()
    search = GumbelSearch(_fixed(prior), n, max_considered=m)
    root = search.search([_c4([3, 3])], ([1.0], np.random.default_rng(seed)))[0]
    scores = [g + math.log(p) for g, p in zip(root.gumbel, root.prior, strict=True)]
    assert root.counts == _naive_halving(scores, m, n)
    policy, action = search.outputs([root], 7)
    most = max(root.counts)
    assert action[0] == max((i for i in range(7) if root.counts[i] == most), key=lambda i: scores[i])
    assert np.allclose(policy[0], prior, atol=1e-6)  # σ = 0: π' is the prior


def _hand_node(seed: int) -> Node:
    rng = np.random.default_rng(seed)
    node = Node(_c4([3, 2, 3]))
    node.prior = rng.dirichlet([0.7] * 7).tolist()
    node.counts = [int(c) for c in rng.integers(0, 4, 7)]
    node.counts[int(rng.integers(7))] = 0  # at least one unvisited move
    node.value_sum = [float(rng.uniform(-1, 1)) * c for c in node.counts]
    node.visits = sum(node.counts)
    node.value = float(rng.uniform(-1, 1))
    return node


def _reference_sigma(node: Node, c_visit: float = 50.0, c_scale: float = 0.1, bounds=None) -> np.ndarray:
    n = np.array(node.counts, dtype=float)
    p = np.array(node.prior)
    q = np.divide(np.array(node.value_sum), n, out=np.zeros(7), where=n > 0)
    if n.sum() > 0:
        seen = n > 0
        v_mix = (node.value + n.sum() * (p[seen] @ q[seen]) / p[seen].sum()) / (1 + n.sum())
    else:
        v_mix = node.value
    completed = np.where(n > 0, q, v_mix)
    low, high = bounds if bounds is not None else (completed.min(), completed.max())
    normalised = (completed - low) / max(high - low, 1e-8)
    return (c_visit + n.max()) * c_scale * normalised


@pytest.mark.parametrize("seed", range(6))
def test_sigma_improved_policy_and_the_interior_choice_match_numpy_references(seed):
    node = _hand_node(seed)
    sigma = _reference_sigma(node)
    assert np.allclose(transformed_q(node, 50.0, 0.1), sigma, atol=1e-9)
    assert np.allclose(transformed_q(node, 10.0, 0.3), _reference_sigma(node, 10.0, 0.3), atol=1e-9)
    logits = np.log(np.array(node.prior)) + sigma
    pi = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    assert np.allclose(improved_policy(node, 50.0, 0.1), pi, atol=1e-9)
    search = GumbelSearch(None, 8, q_scaling="minmax")
    n = np.array(node.counts)
    assert search._edge(node, at_root=False) == int(np.argmax(pi - n / (1 + n.sum())))
    # ``bounds``: the game's results [-1, 1] rescale every node alike
    sigma = _reference_sigma(node, bounds=(-1.0, 1.0))
    assert np.allclose(transformed_q(node, 50.0, 0.1, (-1.0, 1.0)), sigma, atol=1e-9)
    logits = np.log(np.array(node.prior)) + sigma
    pi = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    assert np.allclose(improved_policy(node, 50.0, 0.1, bounds=(-1.0, 1.0)), pi, atol=1e-9)
    search = GumbelSearch(None, 8, q_scaling="bounds")
    search._bounds = (-1.0, 1.0)  # what a search of a Connect Four state sets
    assert search._edge(node, at_root=False) == int(np.argmax(pi - n / (1 + n.sum())))


def test_an_unvisited_node_completes_every_move_with_its_own_value():
    node = _hand_node(0)
    node.counts, node.value_sum, node.visits = [0] * 7, [0.0] * 7, 0
    assert transformed_q(node, 50.0, 0.1) == [0.0] * 7  # all equal: min-max leaves nothing
    assert np.allclose(improved_policy(node, 50.0, 0.1), node.prior)


def test_at_one_simulation_the_move_is_a_gumbel_max_sample_of_the_prior_and_greedy_without_noise():
    prior = [0.05, 0.1, 0.15, 0.4, 0.15, 0.1, 0.05]
    rows = 4000
    search = GumbelSearch(_fixed(prior), 1)
    roots = search.search([_c4([])] * rows, ([1.0] * rows, np.random.default_rng(0)))
    _, action = search.outputs(roots, 7)
    freq = np.bincount(action, minlength=7) / rows
    assert np.all(np.abs(freq - prior) < 4 * np.sqrt(np.array(prior) * (1 - np.array(prior)) / rows)), freq
    _, greedy = search.outputs(search.search([_c4([])] * 3, ([0.0] * 3, np.random.default_rng(0))), 7)
    assert greedy.tolist() == [3, 3, 3]


def test_greedy_search_takes_an_immediate_win_and_its_target_keeps_only_winning_moves():
    state = _c4([3, 3, 2, 2, 1, 1])  # the first player wins at column 0 or 4
    search = GumbelSearch(None, 16)
    roots = search.search([state])
    policy, action = search.outputs(roots, 7)
    assert action[0] in (0, 4)
    assert roots[0].solved is not None
    assert policy[0, [0, 4]].sum() == pytest.approx(1.0)


def test_targets_are_the_improved_policy_over_the_moves_no_proof_rules_out():
    positions = [s for s in ttt_positions() if len(s.history()) >= 4][:60]
    search = GumbelSearch(None, 24)
    roots = search.search(positions, ([1.0] * len(positions), np.random.default_rng(3)))
    policy, action = search.outputs(roots, 9)
    refuted_somewhere = 0
    for row, root in enumerate(roots):
        keep = unrefuted(root)
        refuted_somewhere += len(keep) < len(root.legal)
        pi = np.array(improved_policy(root, 50.0, 0.1, bounds=search._bounds))[keep]
        expected = np.zeros(9)
        expected[[root.legal[i] for i in keep]] = pi / pi.sum()
        assert np.allclose(policy[row], expected, atol=1e-6)
        assert action[row] in [root.legal[i] for i in keep]
    assert refuted_somewhere > 5  # proofs did rule moves out


def _module(**kwargs):
    env = OpenSpielEnv("open_spiel:tic_tac_toe")
    settings = {"hidden_sizes": (32,), "simulations": 8, "search": "gumbel", "dirichlet_fraction": 0.0}
    return AlphaZero(env.spec, **{**settings, **kwargs})


def test_self_play_stores_the_improved_policy_explores_by_gumbel_then_plays_greedily_and_repeats_under_a_seed():
    module = _module(explore_moves=3)
    assert isinstance(module.search, GumbelSearch)
    early = [s for s in ttt_positions() if len(s.history()) < 3][:40]
    late = [s for s in ttt_positions() if len(s.history()) >= 3][:100]
    out = module.search_and_act(early + late, torch.Generator().manual_seed(0))
    greedy_policy, greedy_action = module.search.outputs(module.search.search(late), 9)
    assert torch.allclose(out[SEARCH_POLICY][len(early) :], torch.from_numpy(greedy_policy), atol=1e-6)
    assert torch.equal(out[keys.ACTION][len(early) :], torch.from_numpy(greedy_action))
    repeated = [out[keys.ACTION][: len(early)]]
    for seed in (0, 1):
        again = module.search_and_act(early + late, torch.Generator().manual_seed(seed))
        repeated.append(again[keys.ACTION][: len(early)])
    assert torch.equal(repeated[0], repeated[1])  # the same seed, the same draws
    assert not torch.equal(repeated[0], repeated[2])  # another seed, other Gumbel draws


def test_bad_gumbel_settings_are_refused_in_one_line():
    with pytest.raises(
        ConfigError, match=r"dirichlet_fraction=0.25 .* search: gumbel .*: set model.dirichlet_fraction: 0"
    ):
        _module(dirichlet_fraction=0.25)
    with pytest.raises(ConfigError, match="search"):
        _module(search="beam")
    with pytest.raises(ConfigError, match="max_considered=0"):
        _module(max_considered=0)
    with pytest.raises(ConfigError, match="gumbel_c_scale"):
        _module(gumbel_c_scale=0.0)
    with pytest.raises(ConfigError, match="gumbel_q_scaling='tree'"):
        _module(gumbel_q_scaling="tree")


def test_cli_fit_with_the_gumbel_search_and_its_refusal_in_one_line(tmp_path):
    base = ["fit", "--config", "configs/alphazero_tictactoe.yaml", "--trainer.callbacks", "[]",
            "--trainer.default_root_dir", str(tmp_path), "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
            "--model.init_args.search", "gumbel"]  # fmt: skip
    refused = run_cli(base, cwd=ROOT)
    assert refused.returncode == 2, refused.stderr[-2000:]
    lines = [line for line in refused.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, refused.stderr[-1500:]
    assert re.search(r"model\.dirichlet_fraction=0\.25 .*gumbel", lines[0]), lines[0]
    assert not list((tmp_path / "runs").rglob("*.ckpt"))
    result = run_cli([*base, "--model.init_args.dirichlet_fraction", "0", "--model.init_args.simulations", "8",
                      "--data.init_args.num_envs", "8", "--data.init_args.num_steps", "8",
                      "--data.init_args.total_env_steps", "128"], cwd=ROOT)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert list((tmp_path / "runs").rglob("*.ckpt"))


def test_a_puct_search_of_a_gumbel_trained_network_reads_the_modules_c_puct():
    from rl_lightning.games.search import NetworkMCTS

    module = _module(c_puct=2.5)
    assert NetworkMCTS.of_module(module, 4).c_puct == 2.5
