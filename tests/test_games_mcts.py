"""OpenSpiel's MCTS bot as a baseline: seeded, stronger than random, given its own rows' engine states by the match
driver and the self-play collector, and refused in one line where there is no engine state to search."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

pytest.importorskip("pyspiel")

from rl_lightning import keys  # noqa: E402
from rl_lightning.data.selfplay import PLAYER  # noqa: E402
from rl_lightning.envs.base import BatchedEnv  # noqa: E402
from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402
from rl_lightning.envs.games.bots import OpenSpielMCTSBot, RandomBot  # noqa: E402
from rl_lightning.errors import ConfigError  # noqa: E402
from rl_lightning.games import play_match  # noqa: E402
from rl_lightning.games.panel import resolve_panel  # noqa: E402
from tests.helpers import trainer  # noqa: E402
from tests.test_selfplay import Rollouts, tiny_selfplay  # noqa: E402

MCTS = "rl_lightning.envs.games.bots.OpenSpielMCTSBot"


class EngineSpy(OpenSpielMCTSBot):
    """Plays the lowest legal action of each engine state it is given, after checking that the state is the
    position its row observes (raises otherwise): its actions show it was called with its own rows' states."""

    def __call__(self, obs, action_mask, seat, generator, engine_states=None):
        for row, state in enumerate(engine_states):
            seen = torch.tensor(state.observation_tensor(state.current_player())).reshape(obs[row].shape)
            legal = action_mask[row].nonzero().flatten().tolist()
            if not (
                torch.equal(seen, obs[row]) and state.current_player() == seat[row] and legal == state.legal_actions()
            ):
                raise RuntimeError(f"row {row}: the engine state is not the position this row observes")
        return torch.tensor([min(state.legal_actions()) for state in engine_states])


def _positions(count: int, seed: int) -> tuple[OpenSpielEnv, BatchedEnv]:
    """``count`` Connect Four games a few random moves in."""
    env = BatchedEnv(OpenSpielEnv("open_spiel:connect_four"), count, seed=seed)
    out = env.reset()
    gen = torch.Generator().manual_seed(seed)
    for _ in range(4):
        out = env.step(RandomBot()(out["obs"], out["action_mask"], out["seat"], gen))
    return env, out


def test_mcts_bot_repeats_under_a_seed_and_leaves_the_engine_states_alone():
    env, out = _positions(24, seed=3)
    states = [env.env.engine_state(env.state, i) for i in range(24)]
    histories = [s.history() for s in states]

    def act(bot_seed: int, gen_seed: int) -> torch.Tensor:
        bot = OpenSpielMCTSBot(simulations=8, seed=bot_seed)
        return bot(out["obs"], out["action_mask"], out["seat"], torch.Generator().manual_seed(gen_seed), states)

    first = act(0, 0)
    assert torch.equal(first, act(0, 0))
    assert not torch.equal(first, act(1, 0))  # the bot's seed and the match generator both move its search
    assert not torch.equal(first, act(0, 1))
    assert out["action_mask"].gather(1, first.unsqueeze(1)).all()
    assert [s.history() for s in states] == histories  # the search clones; the live games are untouched


def test_mcts_bot_beats_random_at_connect_four():
    env = OpenSpielEnv("open_spiel:connect_four")
    result = play_match(env, OpenSpielMCTSBot(simulations=25), RandomBot(), 10, seed=0, duplicate=False,
                        baseline=False)  # fmt: skip
    score = result.seat_scores()  # [10 games, 2 seats]: MCTS's return in each seat
    assert int((score > 0).sum()) >= 17, score.T


def test_search_bots_get_their_own_rows_engine_states_in_matches_and_in_self_play(tmp_path):
    # Pig: a roll of 1 passes the turn, so at one tick some games wait for seat 0 and others for seat 1.
    pig = OpenSpielEnv("open_spiel:pig", game_kwargs={"horizon": 60, "winscore": 20})
    result = play_match(pig, RandomBot(), EngineSpy(), 6, seed=1, duplicate=False, baseline=False)
    assert result.tested.isfinite().all()  # every game was played to its end, the spy checking each of its rows
    spy = "tests.test_games_mcts:EngineSpy"
    for seats, league in (({1: spy}, None), (None, {"size": 1, "share": 0.0, "bots": {spy: 0.5}})):
        pl.seed_everything(0)
        module, dm = tiny_selfplay(env=OpenSpielEnv("open_spiel:connect_four"), seats=seats, league=league,
                                   total_env_steps=80, num_steps=10)  # fmt: skip
        rollouts = Rollouts()
        trainer(tmp_path, callbacks=[rollouts]).fit(module, dm)
        ticks = torch.cat([batch[2:] for batch in rollouts.batches])
        spied = ticks[PLAYER] == 1
        lowest = ticks[keys.ACTION_MASK].int().argmax(-1)
        assert spied.any()
        assert torch.equal(ticks[keys.ACTION][spied], lowest[spied])


@pytest.mark.parametrize(
    ("game", "says"),
    [("pettingzoo", "does not expose"), ("hearts", "hides information"), ("cliff_walking", "pays rewards during")],
)
def test_mcts_bot_is_refused_in_one_line_where_it_cannot_search(tmp_path, game, says):
    if game == "pettingzoo":
        pytest.importorskip("pettingzoo")
        from rl_lightning.envs.games import PettingZooEnv

        env = PettingZooEnv("classic/connect_four-v3")
    else:
        env = OpenSpielEnv(f"open_spiel:{game}")
    with pytest.raises(ConfigError, match=says) as err:
        resolve_panel([MCTS], env, None, None, torch.device("cpu"))
    assert "\n" not in str(err.value)
    if env.spec.num_seats == 2:  # the seat map refuses it before the first rollout
        module, dm = tiny_selfplay(env=env, seats={1: MCTS}, total_env_steps=80, num_steps=10)
        with pytest.raises(ConfigError, match=says) as err:
            trainer(tmp_path).fit(module, dm)
        assert "data.seats" in str(err.value)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="engine_states"):
        OpenSpielMCTSBot()(torch.zeros(1, 3), torch.ones(1, 7, dtype=torch.bool), torch.zeros(1, dtype=torch.long),
                           torch.Generator())  # fmt: skip


def test_mcts_bot_refuses_bad_settings_in_one_line():
    for kwargs, field in (({"simulations": 1}, "simulations"), ({"rollouts": 0}, "rollouts"), ({"uct_c": 0}, "uct_c")):
        with pytest.raises(ConfigError, match=field):
            OpenSpielMCTSBot(**kwargs)
