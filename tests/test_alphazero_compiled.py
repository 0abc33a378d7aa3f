"""The compiled PUCT search (``algos/alphazero/compiled_puct.py``, ``grid_games.py``): its rules against OpenSpiel's
over random games, its trees against the Python search's (the reference) bit for bit, and which search a setting
gets, with one-line refusals where ``search_backend: compiled`` cannot apply."""

from __future__ import annotations

import random
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("pyspiel")
pytest.importorskip("numba")

import pyspiel  # noqa: E402
from open_spiel.python.observation import make_observation  # noqa: E402

from rl_lightning.algos import AlphaZero  # noqa: E402
from rl_lightning.algos.alphazero.compiled_puct import NodeView, _numpy_sum  # noqa: E402
from rl_lightning.algos.alphazero.grid_games import (  # noqa: E402
    board_of,
    grid_game_of,
    is_legal,
    landing_cell,
    makes_line,
    write_observation,
)
from rl_lightning.algos.alphazero.puct import PUCTSearch  # noqa: E402
from rl_lightning.algos.alphazero.tree import Node, root_values, tree_positions, unrefuted, visit_targets  # noqa: E402
from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402
from rl_lightning.errors import ConfigError  # noqa: E402
from tests.cli_subprocess import ERROR_PREFIX, ROOT, run_cli  # noqa: E402

# The heavy tier (numba and torch.compile builds): not in the default run; CI runs it as a step of its own.
pytestmark = pytest.mark.heavy

GAMES = ["connect_four", "tic_tac_toe", "connect_four(rows=5,columns=6,x_in_row=3)"]


def _random_states(game, count: int, seed: int, max_moves: int = 40) -> list:
    """``count`` live positions of ``game`` after a random number of uniformly random moves."""
    rng = random.Random(seed)
    states = []
    while len(states) < count:
        state = game.new_initial_state()
        for _ in range(rng.randint(0, max_moves)):
            if state.is_terminal():
                break
            state.apply_action(rng.choice(state.legal_actions()))
        if not state.is_terminal():
            states.append(state)
    return states


@pytest.mark.parametrize("name", GAMES)
def test_the_kernels_play_openspiels_rules_and_write_its_observation_tensor(name):
    game = pyspiel.load_game(name)
    grid = grid_game_of(game)
    assert grid is not None
    planes = np.array(grid.planes, dtype=np.int8)
    observer = make_observation(game)
    rng = random.Random(0)
    finished = {"win": 0, "draw": 0}
    for _ in range(150):
        state = game.new_initial_state()
        board = np.zeros(grid.cells, dtype=np.int8)
        while not state.is_terminal():
            legal = [a for a in range(grid.num_actions) if is_legal(board, a, grid.rows, grid.cols, grid.gravity)]
            assert legal == state.legal_actions()
            out = np.empty(3 * grid.cells, dtype=np.float32)
            write_observation(board, planes, out)
            for seat in (0, 1):
                observer.set_from(state, seat)
                assert np.array_equal(out, observer.tensor.ravel()), (str(state), seat)
            action = rng.choice(legal)
            cell = landing_cell(board, action, grid.rows, grid.cols, grid.gravity)
            board[cell] = 1 + state.current_player()
            state.apply_action(action)
            assert np.array_equal(board, board_of(state, grid))
            won = makes_line(board, cell, grid.rows, grid.cols, grid.in_row)
            assert won == (state.is_terminal() and state.returns()[0] != 0)
        finished["win" if state.returns()[0] != 0 else "draw"] += 1
    assert finished["win"] > 50  # the games ended both ways, so both endings were checked
    if name == "tic_tac_toe":
        assert finished["draw"] > 3


def test_the_prior_normalisation_sums_in_numpys_order():
    rng = np.random.default_rng(0)
    for n in range(1, 40):
        values = rng.random(n) * rng.choice([1e-8, 1.0, 1e6], n)
        assert _numpy_sum(values, n) == values.sum(), n


def _network(name: str, seed: int = 0):
    torch.manual_seed(seed)
    env = OpenSpielEnv(f"open_spiel:{name}")
    return AlphaZero(env.spec, encoder="board", hidden_sizes=(32,), simulations=8)


def _searched(backend: str, states, evaluator, simulations: int, noise_seed: int | None):
    search = PUCTSearch(evaluator, simulations, 1.5, backend=backend)
    noise = None if noise_seed is None else (0.5, 0.25, np.random.default_rng(noise_seed))
    with torch.no_grad():
        return search.search(states, noise)


def _read(roots, num_actions: int) -> dict:
    return {
        "targets": visit_targets(roots, num_actions),
        "values": root_values(roots),
        "counts": [root.counts for root in roots],
        "value_sums": [root.value_sum for root in roots],
        "visits": [root.visits for root in roots],
        "priors": [root.prior for root in roots],
        "solved": [root.solved for root in roots],
        "children": [[None if c is None else (c.solved, c.prior, c.visits, c.legal) for c in root.children]
                     for root in roots],
        "unrefuted": [unrefuted(root) for root in roots],
    }


@pytest.mark.parametrize("name", ["connect_four", "tic_tac_toe"])
@pytest.mark.parametrize("guided", [True, False])
@pytest.mark.parametrize(("simulations", "noise_seed"), [(1, None), (9, 3), (48, None), (48, 7)])
def test_the_compiled_trees_equal_the_python_searchs_bit_for_bit(name, guided, simulations, noise_seed):
    game = pyspiel.load_game(name)
    states = _random_states(game, 48, seed=simulations)
    evaluator = _network(name).logits_and_value if guided else None
    python = _searched("python", states, evaluator, simulations, noise_seed)
    compiled = _searched("compiled", states, evaluator, simulations, noise_seed)
    assert isinstance(python[0], Node)
    assert isinstance(compiled[0], NodeView)
    expected, got = _read(python, game.num_distinct_actions()), _read(compiled, game.num_distinct_actions())
    for field, value in expected.items():
        same = np.array_equal(value, got[field]) if isinstance(value, np.ndarray) else value == got[field]
        assert same, field
    if simulations == 48:  # proofs happened, so the solver's part was compared too
        assert sum(any(c is not None and c[0] is not None for c in row) for row in expected["children"]) > 5


def test_a_tictactoe_search_proves_what_the_python_search_proves_at_every_position():
    from tests.test_games_search import ttt_positions

    states = ttt_positions()
    game = states[0].get_game()
    expected = _read(_searched("python", states, None, 200, None), 9)
    got = _read(_searched("compiled", states, None, 200, None), 9)
    assert expected["solved"] == got["solved"]
    assert expected["counts"] == got["counts"]
    assert expected["unrefuted"] == got["unrefuted"]
    assert sum(solved is not None for solved in expected["solved"]) > 100
    assert game.max_utility() == 1.0


@pytest.mark.parametrize("name", ["connect_four", "tic_tac_toe"])
def test_tree_positions_of_compiled_trees_equal_the_python_ones(name):
    game = pyspiel.load_game(name)
    states = _random_states(game, 40, seed=4, max_moves=6)
    evaluator = _network(name, seed=3).logits_and_value
    picked = {}
    for backend in ("python", "compiled"):
        nodes = tree_positions(_searched(backend, states, evaluator, 64, 2), 6, 3)
        flat = [node for row in nodes for node in row]
        targets = visit_targets(flat, game.num_distinct_actions())
        histories = [n.state.history() for n in flat]
        picked[backend] = ([len(row) for row in nodes], histories, targets, [n.solved for n in flat])
    assert picked["python"][0] == picked["compiled"][0]
    assert sum(picked["python"][0]) > 100
    assert picked["python"][1] == picked["compiled"][1]
    assert np.array_equal(picked["python"][2], picked["compiled"][2])
    assert picked["python"][3] == picked["compiled"][3]


@pytest.mark.parametrize(("name", "tree_targets"), [("connect_four", 0), ("tic_tac_toe", 4)])
def test_self_play_decisions_equal_under_either_backend(name, tree_targets):
    torch.manual_seed(0)
    env = OpenSpielEnv(f"open_spiel:{name}")
    module = AlphaZero(env.spec, encoder="board", hidden_sizes=(32,), simulations=24, tree_targets=tree_targets,
                       tree_min_visits=2)  # fmt: skip
    states = _random_states(pyspiel.load_game(name), 32, seed=5, max_moves=8)
    out = {}
    for backend in ("python", "compiled"):
        module.search.backend = backend
        out[backend] = module.search_and_act(states, torch.Generator().manual_seed(11))
    assert set(out["python"].keys()) == set(out["compiled"].keys())
    for key in out["python"].keys():  # noqa: SIM118 (a TensorDict iterates over its rows)
        assert torch.equal(out["python"][key], out["compiled"][key]), key
    if tree_targets:
        assert out["compiled"]["tree_valid"].sum() > 50


def test_networkmcts_plays_the_same_moves_compiled():
    from rl_lightning.games.search import NetworkMCTS

    module = _network("connect_four", seed=2)
    states = _random_states(pyspiel.load_game("connect_four"), 24, seed=9)
    mask = torch.zeros(len(states), 7, dtype=torch.bool)
    for row, state in enumerate(states):
        mask[row, state.legal_actions()] = True
    moves = {}
    for backend, temperature in [("python", 0.0), ("compiled", 0.0), ("python", 1.0), ("compiled", 1.0)]:
        bot = NetworkMCTS(module, simulations=24, temperature=temperature)
        bot.backend = backend
        moves[backend, temperature] = bot(None, mask, torch.zeros(len(states)), torch.Generator().manual_seed(1),
                                          engine_states=states)  # fmt: skip
    assert torch.equal(moves["python", 0.0], moves["compiled", 0.0])
    assert torch.equal(moves["python", 1.0], moves["compiled", 1.0])


def test_which_search_a_setting_gets():
    c4, ttt = pyspiel.load_game("connect_four"), pyspiel.load_game("tic_tac_toe")
    assert PUCTSearch(None, 4, 1.5).compiled_grid(c4) is not None
    assert PUCTSearch(None, 4, 1.5).compiled_grid(ttt) is not None
    assert PUCTSearch(None, 4, 1.5, backend="python").compiled_grid(c4) is None
    assert PUCTSearch(None, 4, 1.5, rollout_weight=0.5).compiled_grid(c4) is None  # auto: the Python search
    assert PUCTSearch(None, 4, 1.5).compiled_grid(pyspiel.load_game("connect_four(egocentric_obs_tensor=true)")) is None
    assert PUCTSearch(None, 4, 1.5).compiled_grid(pyspiel.load_game("othello")) is None
    info_state = PUCTSearch(None, 4, 1.5)
    info_state._observation = "info_state"
    assert info_state.compiled_grid(ttt) is None
    env = OpenSpielEnv("open_spiel:connect_four")
    assert AlphaZero(env.spec, simulations=4).search.backend == "auto"
    assert AlphaZero(env.spec, simulations=4, search_backend="python").search.backend == "python"


def test_compiled_where_it_cannot_apply_is_refused_in_one_line():
    c4 = pyspiel.load_game("connect_four")
    with pytest.raises(ConfigError, match=r"search_backend=compiled: rollout_weight=0.5 plays random rollouts"):
        PUCTSearch(None, 4, 1.5, rollout_weight=0.5, backend="compiled").compiled_grid(c4)
    with pytest.raises(ConfigError, match=r"search_backend=compiled: othello\(\) has no compiled rules"):
        PUCTSearch(None, 4, 1.5, backend="compiled").compiled_grid(pyspiel.load_game("othello"))
    with pytest.raises(ConfigError, match=r"search_backend='fast': use auto, compiled or python"):
        PUCTSearch(None, 4, 1.5, backend="fast")
    env = OpenSpielEnv("open_spiel:connect_four")
    with pytest.raises(ConfigError, match=r"model.search_backend=compiled covers search: puct, not gumbel"):
        AlphaZero(env.spec, simulations=4, search="gumbel", dirichlet_fraction=0.0, search_backend="compiled")
    with pytest.raises(ConfigError, match=r"search_backend"):
        AlphaZero(env.spec, simulations=4, search_backend="numba")


def test_without_numba_the_compiled_search_is_refused_in_one_line_naming_the_fix():
    # A fresh interpreter in which numba cannot be imported: the rules still import, a search the compiled form
    # covers is refused naming the fix, and search_backend: python runs.
    script = (
        "import sys; sys.modules['numba'] = None\n"
        "import pyspiel\n"
        "from rl_lightning.algos.alphazero.puct import PUCTSearch\n"
        "from rl_lightning.errors import ConfigError\n"
        "c4 = pyspiel.load_game('connect_four')\n"
        "try:\n"
        "    PUCTSearch(None, 4, 1.5).search([c4.new_initial_state()])\n"
        "except ConfigError as error:\n"
        "    print('REFUSED', error)\n"
        "roots = PUCTSearch(None, 4, 1.5, backend='python').search([c4.new_initial_state()])\n"
        "print('PYTHON', roots[0].visits)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    expected = ("REFUSED search_backend=auto: the compiled search of connect_four() needs numba; "
                "pip install 'rl-lightning[games]', or set search_backend: python")  # fmt: skip
    assert lines[0] == expected, lines
    assert lines[1] == "PYTHON 4"


def test_cli_refuses_compiled_for_the_gumbel_search_in_one_line_and_fits_as_the_python_search_does(tmp_path):
    # The Gumbel search, which has no compiled form, refused; the tic-tac-toe config as it ships (tree targets
    # included) fitted compiled and then with the Python search: the same weights.
    base = ["fit", "--config", "configs/alphazero_tictactoe.yaml", "--trainer.callbacks", "[]",
            "--trainer.default_root_dir", str(tmp_path), "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
            "--model.init_args.search_backend", "compiled", "--model.init_args.simulations", "8",
            "--data.init_args.num_envs", "8", "--data.init_args.num_steps", "8",
            "--data.init_args.total_env_steps", "128"]  # fmt: skip
    refused = run_cli([*base, "--model.init_args.search", "gumbel", "--model.init_args.dirichlet_fraction", "0"],
                      cwd=ROOT)  # fmt: skip
    assert refused.returncode == 2, refused.stderr[-2000:]
    lines = [line for line in refused.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, refused.stderr[-1500:]
    assert re.search(r"model\.search_backend=compiled covers search: puct, not gumbel", lines[0]), lines[0]
    assert not list((tmp_path / "runs").rglob("*.ckpt"))
    result = run_cli(base, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    (compiled,) = list((tmp_path / "runs").rglob("*.ckpt"))
    python_dir = tmp_path / "python"
    python_args = [*base, "--model.init_args.search_backend", "python", "--trainer.logger.init_args.save_dir",
                   str(python_dir)]  # fmt: skip
    assert run_cli(python_args, cwd=ROOT).returncode == 0
    (python,) = list(python_dir.rglob("*.ckpt"))
    weights = [torch.load(path, weights_only=False)["state_dict"] for path in (compiled, python)]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[1])  # the same fit, bit for bit
