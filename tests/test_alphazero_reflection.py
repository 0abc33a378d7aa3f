"""AlphaZero's ``reflect``: the board reflection against the engine itself (a game played column for mirrored column
shows the mirrored board, the mirrored legal moves and the same result), the minibatch's reflected rows against a
row-by-row hand mirror, the loss with ``reflect`` against the plain loss of the hand-mirrored minibatch, one-line
refusals, and a CLI fit with it on."""

from __future__ import annotations

import dataclasses
import random
import re

import numpy as np
import pytest
import torch

pytest.importorskip("pyspiel")

from rl_lightning import keys  # noqa: E402
from rl_lightning.algos import AlphaZero  # noqa: E402
from rl_lightning.algos.alphazero import SEARCH_POLICY  # noqa: E402
from rl_lightning.algos.alphazero.module import TREE_MASK, TREE_OBS, TREE_POLICY, TREE_VALID  # noqa: E402
from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402
from rl_lightning.envs.games.reflection import board_reflection  # noqa: E402
from rl_lightning.errors import ConfigError  # noqa: E402
from tests.cli_subprocess import ERROR_PREFIX, ROOT, run_cli  # noqa: E402

GAMES = {"connect_four": lambda a: 6 - a, "tic_tac_toe": lambda a: 3 * (a // 3) + 2 - a % 3}


def _board(state, shape):
    return np.array(state.observation_tensor(state.current_player() if not state.is_terminal() else 0)).reshape(shape)


@pytest.mark.parametrize("game", sorted(GAMES))
def test_a_game_played_in_mirrored_moves_shows_the_mirrored_board_moves_and_result(game):
    env = OpenSpielEnv(f"open_spiel:{game}")
    reflection = board_reflection(env.spec)
    assert reflection is not None
    mirror_move = GAMES[game]
    assert reflection.moves(torch.arange(env.spec.num_actions)).tolist() == [mirror_move(a) for a in
                                                                             range(env.spec.num_actions)]  # fmt: skip
    rng = random.Random(0)
    positions = 0
    for _ in range(40):
        state, mirrored = env.game.new_initial_state(), env.game.new_initial_state()
        while not state.is_terminal():
            board = torch.tensor(_board(state, env.spec.obs_shape))
            assert torch.equal(reflection.observations(board), torch.tensor(_board(mirrored, env.spec.obs_shape)))
            assert torch.equal(reflection.observations(board[None])[0], reflection.observations(board))
            mask = torch.zeros(env.spec.num_actions, dtype=torch.bool)
            mask[state.legal_actions()] = True
            assert sorted(mirrored.legal_actions()) == torch.nonzero(reflection.per_move(mask)).flatten().tolist()
            move = rng.choice(state.legal_actions())
            state.apply_action(move)
            mirrored.apply_action(mirror_move(move))
            positions += 1
        assert mirrored.is_terminal()
        assert mirrored.returns() == state.returns()
    assert positions > 200


def test_no_reflection_for_other_games_observations_or_rules():
    assert board_reflection(OpenSpielEnv("open_spiel:leduc_poker").spec) is None
    c4 = OpenSpielEnv("open_spiel:connect_four").spec
    assert board_reflection(dataclasses.replace(c4, game_params=(("rows", 5),))) is None
    assert board_reflection(dataclasses.replace(c4, name="open_spiel:breakthrough")) is None


def _c4_module(**kwargs):
    env = OpenSpielEnv("open_spiel:connect_four")
    return AlphaZero(env.spec, encoder="board", hidden_sizes=(32,), simulations=4, **kwargs)


def _minibatch(rows: int, tree: int = 3, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(rows, 7, generator=gen) > 0.3
    mask[:, 2] = True
    policy = torch.rand(rows, 7, generator=gen) * mask
    tree_mask = torch.rand(rows, tree, 7, generator=gen) > 0.2
    return {
        keys.OBS: torch.randint(0, 2, (rows, 3, 6, 7), generator=gen).float(),
        keys.ACTION_MASK: mask,
        keys.ACTION: torch.randint(0, 7, (rows,), generator=gen),
        SEARCH_POLICY: policy / policy.sum(-1, keepdim=True),
        keys.RETURN: torch.randn(rows, generator=gen),
        keys.VALUE: torch.randn(rows, generator=gen),
        TREE_OBS: torch.randint(0, 2, (rows, tree, 3, 6, 7), generator=gen).float(),
        TREE_MASK: tree_mask,
        TREE_POLICY: torch.rand(rows, tree, 7, generator=gen) * tree_mask,
        TREE_VALID: torch.rand(rows, tree, generator=gen) > 0.3,
    }


def _mirror_row_by_hand(mb: dict, row: int) -> dict:
    """One row mirrored with numpy's own flips: columns of every plane, move c to 6 - c; values kept."""
    out = {key: value[row].clone() for key, value in mb.items()}
    for key in (keys.OBS, TREE_OBS):
        out[key] = torch.from_numpy(np.ascontiguousarray(out[key].numpy()[..., ::-1]))
    for key in (keys.ACTION_MASK, SEARCH_POLICY, TREE_MASK, TREE_POLICY):
        out[key] = torch.from_numpy(np.ascontiguousarray(out[key].numpy()[..., ::-1]))
    out[keys.ACTION] = 6 - out[keys.ACTION]
    return out


def test_reflected_rows_are_the_generators_draws_mirrored_by_hand_and_the_rest_untouched():
    module = _c4_module(reflect=True)
    mb = _minibatch(64)
    module.generator.manual_seed(11)
    flips = torch.rand(64, generator=torch.Generator().manual_seed(11)) < 0.5
    assert 20 < flips.sum() < 44
    out = module.reflected(mb)
    for row in range(64):
        expected = _mirror_row_by_hand(mb, row) if flips[row] else {key: value[row] for key, value in mb.items()}
        for key, value in expected.items():
            assert torch.equal(out[key][row], value), (row, key)


def test_the_loss_with_reflect_is_the_plain_loss_of_the_minibatch_mirrored_by_hand():
    plain = _c4_module()
    module = _c4_module(reflect=True)
    module.load_state_dict(plain.state_dict())
    mb = _minibatch(32, seed=4)
    module.generator.manual_seed(5)
    flips = torch.rand(32, generator=torch.Generator().manual_seed(5)) < 0.5
    by_hand = [_mirror_row_by_hand(mb, row) if flips[row] else {k: v[row] for k, v in mb.items()} for row in range(32)]
    stacked = {key: torch.stack([row[key] for row in by_hand]) for key in mb}
    loss, terms = module.minibatch_loss(mb)
    expected, expected_terms = plain.minibatch_loss(stacked)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert torch.allclose(terms, expected_terms, rtol=1e-6)
    unmirrored, _ = plain.minibatch_loss(mb)
    assert abs(unmirrored.item() - loss.item()) > 1e-4  # the mirrored rows do change what the network is shown


def test_reflect_is_refused_in_one_line_where_it_would_be_wrong():
    with pytest.raises(ConfigError, match=r"model\.reflect=true: no left-right reflection is known for "
                                          r"open_spiel:leduc_poker"):  # fmt: skip
        AlphaZero(OpenSpielEnv("open_spiel:leduc_poker").spec, reflect=True)
    with pytest.raises(ConfigError, match=r"model\.reflect=true mirrors the raw board.*normalize_obs: false"):
        _c4_module(reflect=True, normalize_obs=True)


def test_cli_fit_with_reflect_on_tictactoe_trains_and_a_bad_game_is_refused(tmp_path):
    common = ["--trainer.callbacks", "[]", "--trainer.default_root_dir", str(tmp_path), "--trainer.logger.init_args"
              ".save_dir", str(tmp_path / "runs"), "--model.init_args.reflect", "true"]  # fmt: skip
    fit = run_cli(["fit", "--config", "configs/alphazero_tictactoe.yaml", *common,
                   "--data.init_args.total_env_steps", "2048"], cwd=ROOT)  # fmt: skip
    assert fit.returncode == 0, fit.stderr[-2000:]
    assert list(tmp_path.rglob("*.ckpt")), sorted(tmp_path.rglob("*"))
    bad = run_cli(["fit", "--config", "configs/alphazero_tictactoe.yaml", *common,
                   "--data.init_args.env.init_args.env_id", "open_spiel:breakthrough"], cwd=ROOT)  # fmt: skip
    assert bad.returncode == 2, bad.stderr[-2000:]
    lines = [line for line in bad.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, lines
    assert re.search(r"model\.reflect=true: no left-right reflection", lines[0]), lines[0]
