"""``MinimaxBot``: its game values against OpenSpiel's own alpha-beta search, optimal play in matches, refusals."""

from __future__ import annotations

import random

import pytest
import torch

from rl_lightning.errors import ConfigError

pytest.importorskip("pyspiel")

from open_spiel.python.algorithms.minimax import alpha_beta_search  # noqa: E402

from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402
from rl_lightning.envs.games.bots import RandomBot  # noqa: E402
from rl_lightning.envs.games.bots.minimax import MinimaxBot  # noqa: E402
from rl_lightning.games import match_metrics, play_match  # noqa: E402


def test_values_match_openspiels_alpha_beta_search() -> None:
    env = OpenSpielEnv("open_spiel:tic_tac_toe")
    bot = MinimaxBot()
    rng = random.Random(0)
    checked = 0
    for _ in range(12):
        state = env.game.new_initial_state()
        for _ in range(rng.randrange(6)):
            state.apply_action(rng.choice(state.legal_actions()))
        if state.is_terminal():
            continue
        player = state.current_player()
        value, _ = alpha_beta_search(env.game, state.clone(), maximizing_player_id=player)
        assert bot.value(state) == value
        # each optimal action keeps the value (brute force: the value of every child)
        for action in bot.optimal_actions(state):
            child_value, _ = alpha_beta_search(env.game, state.child(action), maximizing_player_id=player)
            assert child_value == value
        checked += 1
    assert checked >= 8
    assert bot.value(env.game.new_initial_state()) == 0  # tic-tac-toe is a draw


def test_minimax_never_loses_and_draws_itself() -> None:
    env = OpenSpielEnv("open_spiel:tic_tac_toe")
    against_random = match_metrics(play_match(env, MinimaxBot(), RandomBot(), 30, seed=1, duplicate=False))
    assert against_random["loss_rate"] == 0
    assert against_random["win_rate"] > 0.8
    itself = match_metrics(play_match(env, MinimaxBot(), MinimaxBot(), 10, seed=2, duplicate=False, baseline=False))
    assert itself["draw_rate"] == 1


@pytest.mark.parametrize(("game", "why"), [("kuhn_poker", "it hides information"), ("pig", "it has chance nodes")])
def test_refuses_games_it_cannot_solve_naming_itself_and_why(game: str, why: str) -> None:
    with pytest.raises(ConfigError, match=rf"^GameEvaluation: MinimaxBot cannot play \S*{game}: {why}") as err:
        MinimaxBot().check_env(OpenSpielEnv(f"open_spiel:{game}"), "GameEvaluation")
    assert "OpenSpielMCTSBot" not in str(err.value)  # no other bot's name, nor a bot refused on this game too


def test_refuses_rows_without_engine_states() -> None:
    with pytest.raises(ConfigError, match="engine states"):
        MinimaxBot()(None, torch.ones(1, 9, dtype=torch.bool), torch.zeros(1), torch.Generator())
