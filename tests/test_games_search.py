"""The searching player (``NetworkMCTS``): its moves against brute-force minimax on tic-tac-toe and Connect Four
positions, the side its values are scored from, seeded repeats, its place in matches, seats and GameEvaluation,
and its one-line refusals where a search would read hidden information or cannot score the seats."""

from __future__ import annotations

import functools
import random

import lightning.pytorch as pl
import pytest
import torch

pytest.importorskip("pyspiel")

import pyspiel  # noqa: E402

from rl_lightning import keys  # noqa: E402
from rl_lightning.algos import PPO  # noqa: E402
from rl_lightning.callbacks import GameEvaluation  # noqa: E402
from rl_lightning.data.selfplay import PLAYER  # noqa: E402
from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402
from rl_lightning.envs.games.bots import RandomBot  # noqa: E402
from rl_lightning.errors import ConfigError  # noqa: E402
from rl_lightning.games import play_match  # noqa: E402
from rl_lightning.games.panel import resolve_panel  # noqa: E402
from rl_lightning.games.search import NetworkMCTS, module_evaluator  # noqa: E402
from tests.helpers import trainer  # noqa: E402
from tests.test_selfplay import Rollouts, tiny_selfplay  # noqa: E402

SEARCH = "rl_lightning.games.search.NetworkMCTS"
TTT = pyspiel.load_game("tic_tac_toe")


@functools.cache
def ttt_value(history: tuple[int, ...]) -> float:
    """Seat 0's game value under perfect play (full minimax)."""
    state = TTT.new_initial_state()
    for action in history:
        state.apply_action(action)
    if state.is_terminal():
        return state.returns()[0]
    values = [ttt_value((*history, action)) for action in state.legal_actions()]
    return max(values) if state.current_player() == 0 else min(values)


def ttt_best(state) -> set[int]:
    """The minimax-optimal moves of the seat to act."""
    sign = 1 if state.current_player() == 0 else -1
    values = {a: sign * ttt_value((*state.history(), a)) for a in state.legal_actions()}
    return {a for a, v in values.items() if v == max(values.values())}


def ttt_positions() -> list:
    """Every reachable non-terminal tic-tac-toe position, once per board."""
    found: dict[str, object] = {}

    def walk(state) -> None:
        if state.is_terminal() or str(state) in found:
            return
        found[str(state)] = state
        for action in state.legal_actions():
            child = state.clone()
            child.apply_action(action)
            walk(child)

    walk(TTT.new_initial_state())
    return list(found.values())


def act(bot, states, seed=0):
    mask = torch.zeros(len(states), states[0].get_game().num_distinct_actions(), dtype=torch.bool)
    for row, state in enumerate(states):
        mask[row, state.legal_actions()] = True
    seat = torch.tensor([s.current_player() for s in states])
    return bot(None, mask, seat, torch.Generator().manual_seed(seed), engine_states=states).tolist()


def test_uniform_search_plays_minimax_moves_in_tic_tac_toe():
    # Positions four or more moves in where some legal move is worse than the best: with a uniform prior and exact
    # results only, 200 simulations find a minimax-optimal move in every sampled one (wins, blocks, forks).
    positions = [s for s in ttt_positions() if len(s.history()) >= 4 and len(ttt_best(s)) < len(s.legal_actions())]
    sample = random.Random(0).sample(positions, 400)
    moves = act(NetworkMCTS(simulations=200), sample)
    wrong = [(str(s), m, ttt_best(s)) for s, m in zip(sample, moves, strict=True) if m not in ttt_best(s)]
    assert not wrong, wrong[:3]


def test_search_proves_game_values_equal_to_full_minimax():
    # Five or more moves in, 300 simulations expand the whole game tree: the proven result at the root (MCTS-Solver)
    # is the minimax value, and the move keeps it.
    positions = [s for s in ttt_positions() if len(s.history()) >= 5]
    sample = random.Random(3).sample(positions, 300)
    bot = NetworkMCTS(simulations=300)
    roots = bot.search(sample)
    for state, root in zip(sample, roots, strict=True):
        exact = ttt_value(tuple(state.history()))
        assert root.solved == [exact, -exact], str(state)
    moves = act(bot, sample)
    assert all(m in ttt_best(s) for s, m in zip(sample, moves, strict=True))


def c4_move_values(state, depth: int) -> dict[int, float]:
    """Each legal move's value for the seat to act, by minimax ``depth`` plies deep (unknown outcomes count 0)."""
    me, values = state.current_player(), {}
    for action in state.legal_actions():
        child = state.clone()
        child.apply_action(action)
        if child.is_terminal():
            values[action] = child.returns()[me]
        else:
            values[action] = -max(c4_move_values(child, depth - 1).values()) if depth > 1 else 0.0
    return values


def c4_forced(count: int, seed: int) -> list[tuple[object, set[int]]]:
    """Connect Four positions where a two-ply minimax separates the moves (a win to take or a threat to block),
    with the moves it rates best."""
    game = pyspiel.load_game("connect_four")
    rng = random.Random(seed)
    found = []
    while len(found) < count:
        state = game.new_initial_state()
        while not state.is_terminal():
            values = c4_move_values(state, 2)
            best = max(values.values())
            if best > min(values.values()) and best > -1:
                found.append((state.clone(), {a for a, v in values.items() if v == best}))
                break
            state.apply_action(rng.choice(state.legal_actions()))
    return found


def test_uniform_search_takes_wins_and_blocks_threats_in_connect_four():
    cases = c4_forced(40, seed=1)
    moves = act(NetworkMCTS(simulations=150), [state for state, _ in cases])
    wrong = [(str(s), m, best) for (s, best), m in zip(cases, moves, strict=True) if m not in best]
    assert not wrong, wrong[:2]


def ttt_oracle():
    """An evaluator with the exact minimax value for the seat to act and a uniform prior: what a perfect network
    would say, read from the observation planes alone (the acting seat follows from the piece counts)."""

    def evaluate(obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values = []
        for planes in obs:
            state = TTT.new_initial_state()
            # planes: empty, noughts (seat 1), crosses (seat 0)
            xs, os = planes[2].flatten().nonzero().flatten().tolist(), planes[1].flatten().nonzero().flatten().tolist()
            for x, o in zip(xs, os + [None], strict=False):
                state.apply_action(x)
                if o is not None:
                    state.apply_action(o)
            sign = 1.0 if state.current_player() == 0 else -1.0
            values.append(sign * ttt_value(tuple(state.history())))
        return torch.zeros(mask.shape), torch.tensor(values)

    return evaluate


def test_network_values_are_scored_from_the_movers_side():
    # With the exact value of every position for its seat to act, one look at each child settles the move: a search
    # that scored the opponent's positions with the wrong sign would pick the worst move instead.
    assert TTT.observation_tensor_shape() == [3, 3, 3]
    positions = [s for s in ttt_positions() if len(ttt_best(s)) < len(s.legal_actions())]
    sample = random.Random(2).sample(positions, 150)
    moves = act(NetworkMCTS(simulations=20, evaluator=ttt_oracle()), sample)
    wrong = [str(s) for s, m in zip(sample, moves, strict=True) if m not in ttt_best(s)]
    assert not wrong, wrong[:3]


def test_search_repeats_under_a_seed_and_leaves_the_engine_states_alone():
    states = [state for state, _ in c4_forced(12, seed=5)]
    histories = [s.history() for s in states]
    bot = NetworkMCTS(simulations=30, temperature=1.0)
    first = act(bot, states, seed=0)
    assert first == act(bot, states, seed=0)
    assert first != act(bot, states, seed=1)  # with temperature, the draw follows the generator
    assert act(NetworkMCTS(simulations=30), states, 0) == act(NetworkMCTS(simulations=30), states, 1)  # greedy
    rollouts = NetworkMCTS(simulations=30, rollout_weight=0.5)  # leaves mixed with random games from the seed
    assert act(rollouts, states, 0) == act(rollouts, states, 0)
    assert any(act(rollouts, states, 0) != act(rollouts, states, seed) for seed in (1, 2, 3))
    assert [s.history() for s in states] == histories  # the search clones; the live games are untouched
    assert all(m in s.legal_actions() for s, m in zip(states, first, strict=True))


def test_module_evaluator_reads_the_ppo_policy_and_value():
    env = OpenSpielEnv("open_spiel:tic_tac_toe")
    module = PPO(env_spec=env.spec, hidden_sizes=(16,)).eval()
    states = [s for s in ttt_positions() if len(s.history()) == 3][:8]
    obs = torch.stack([torch.tensor(s.observation_tensor(s.current_player())).reshape(3, 3, 3) for s in states])
    mask = torch.zeros(len(states), 9, dtype=torch.bool)
    for row, state in enumerate(states):
        mask[row, state.legal_actions()] = True
    logits, value = module_evaluator(module)(obs, mask)
    td = module.act(TensorDictOf(obs, mask), deterministic=True)
    assert torch.equal(logits.argmax(-1), td[keys.ACTION])
    assert (logits[~mask] < -1e8).all()
    assert value.shape == (len(states),)
    with pytest.raises(ConfigError, match="no policy and value heads"):
        NetworkMCTS(module=torch.nn.Linear(1, 1))


def TensorDictOf(obs, mask):  # noqa: N802 - reads like the constructor it stands for
    from tensordict import TensorDict

    return TensorDict({keys.OBS: obs, keys.ACTION_MASK: mask}, batch_size=[len(obs)])


def test_search_beats_random_in_matches_and_plays_seats(tmp_path):
    env = OpenSpielEnv("open_spiel:connect_four")
    result = play_match(env, NetworkMCTS(simulations=50), RandomBot(), 8, seed=0, duplicate=False, baseline=False)
    assert int((result.seat_scores() > 0).sum()) >= 15, result.seat_scores().T
    pl.seed_everything(0)
    module, dm = tiny_selfplay(env=OpenSpielEnv("open_spiel:tic_tac_toe"), seats={1: SEARCH}, total_env_steps=60,
                               num_steps=10)  # fmt: skip
    rollouts = Rollouts()
    trainer(tmp_path, callbacks=[rollouts]).fit(module, dm)
    ticks = torch.cat([batch[2:] for batch in rollouts.batches])
    searched = ticks[PLAYER] == 1
    assert searched.any()
    assert ticks[keys.ACTION_MASK][searched].gather(1, ticks[keys.ACTION][searched].unsqueeze(1)).all()


def test_game_evaluation_plays_the_searching_agent(tmp_path):
    env = OpenSpielEnv("open_spiel:tic_tac_toe")
    torch.manual_seed(0)  # the untrained network's own strength varies with its initialisation (0.5-0.7 seen)
    module = PPO(env_spec=env.spec, hidden_sizes=(16,))
    records = {}
    for simulations in (0, 60):
        callback = GameEvaluation(every_n_updates=1, opponents=["random"], num_games=40, rating_games=0, env=env,
                                  search_simulations=simulations)  # fmt: skip
        records[simulations] = callback.measure(None, module)["eval/vs_random/win_rate"]
    assert records[60] > records[0] + 0.2  # an untrained network alone plays about as random; its search wins
    with pytest.raises(ConfigError, match="search_simulations=-1"):
        GameEvaluation(every_n_updates=1, search_simulations=-1)


@pytest.mark.parametrize(
    ("game", "says"),
    [("pettingzoo", "does not expose"), ("kuhn_poker", "hides information"), ("pig", "has chance nodes"),
     ("cliff_walking", "pays rewards during")],
)  # fmt: skip
def test_search_is_refused_in_one_line_where_it_cannot_search(tmp_path, game, says):
    if game == "pettingzoo":
        pytest.importorskip("pettingzoo")
        from rl_lightning.envs.games import PettingZooEnv

        env = PettingZooEnv("classic/connect_four-v3")
    else:
        env = OpenSpielEnv(f"open_spiel:{game}")
    with pytest.raises(ConfigError, match=says) as err:
        resolve_panel([SEARCH], env, None, None, torch.device("cpu"))
    assert "\n" not in str(err.value)
    if game == "kuhn_poker":  # the seat map and GameEvaluation refuse it before the first rollout
        module, dm = tiny_selfplay(env=env, seats={1: SEARCH}, total_env_steps=80, num_steps=10)
        with pytest.raises(ConfigError, match=says) as err:
            trainer(tmp_path).fit(module, dm)
        assert "data.seats" in str(err.value)
        module, dm = tiny_selfplay(env=OpenSpielEnv("open_spiel:kuhn_poker"), total_env_steps=80, num_steps=10)
        callback = GameEvaluation(every_n_updates=1, opponents=["random"], num_games=20, search_simulations=10)
        with pytest.raises(ConfigError, match=says):
            trainer(tmp_path, callbacks=[callback]).fit(module, dm)
    with pytest.raises(ConfigError, match="engine_states"):
        NetworkMCTS()(torch.zeros(1, 3), torch.ones(1, 7, dtype=torch.bool), torch.zeros(1, dtype=torch.long),
                      torch.Generator())  # fmt: skip


def test_search_refuses_bad_settings_in_one_line():
    bad = [({"simulations": 0}, "simulations"), ({"c_puct": 0}, "c_puct"), ({"temperature": -1}, "temperature"),
           ({"rollout_weight": 1.5}, "rollout_weight")]  # fmt: skip
    for kwargs, field in bad:
        with pytest.raises(ConfigError, match=field):
            NetworkMCTS(**kwargs)
