"""Bundled game bots: what they decode matches the engine's own state, and they play the rules they state."""

from __future__ import annotations

import random

import pytest
import torch

pytest.importorskip("pyspiel")

import pyspiel  # noqa: E402

from rl_lightning.envs.games.bots import ConnectFourHeuristic, HeartsHeuristic, RandomBot, load_bot  # noqa: E402
from rl_lightning.envs.games.bots.connect_four import boards  # noqa: E402
from rl_lightning.envs.games.bots.hearts import QUEEN_OF_SPADES, decode  # noqa: E402
from rl_lightning.errors import ConfigError  # noqa: E402

_RANKS, _SUITS = "23456789TJQKA", "CDHS"


def hearts_positions(count: int, seed: int, pass_cards: bool = True) -> list:
    """Random Hearts decision points (the state before a seat acts), from random play."""
    game = pyspiel.load_game("hearts", {"pass_cards": pass_cards})
    rng, states = random.Random(seed), []
    while len(states) < count:
        state = game.new_initial_state()
        while not state.is_terminal():
            if not state.is_chance_node() and rng.random() < 0.3:
                states.append(state.clone())
            state.apply_action(rng.choice(state.legal_actions()))
    return states[:count]


def truth_from_engine(state: object) -> tuple[set[int], int, bool]:
    """(hand, led card or -1, passing) of the acting seat from the engine's string and history, not the tensor."""
    text = state.information_state_string(state.current_player())
    lines = text.split("\n")
    start = lines.index("Hand: ") + 1
    hand = set()
    for line in lines[start : start + 4]:
        suit, _, ranks = line.partition(" ")
        hand |= {_RANKS.index(r) * 4 + _SUITS.index(suit) for r in ranks.strip().replace("none", "")}
    history = state.history()
    passing = history[0] != 0 and len(history) < 53 + 12
    played = len(history) - 53 - (12 if history[0] != 0 else 0)
    led = history[len(history) - played % 4] if played > 0 and played % 4 else -1
    return hand, (-1 if passing else led), passing


def test_hearts_decoding_matches_the_engine() -> None:
    states = hearts_positions(300, seed=0) + hearts_positions(100, seed=1, pass_cards=False)
    obs = torch.tensor([s.information_state_tensor(s.current_player()) for s in states])
    view = decode(obs)
    for index, state in enumerate(states):
        hand, led, passing = truth_from_engine(state)
        assert set(view["hand"][index].nonzero().flatten().tolist()) == hand
        assert bool(view["passing"][index]) == passing
        assert int(view["led"][index]) == led
    assert 0 < int(view["passing"].sum()) < len(states)  # both phases were seen
    assert int((view["led"] >= 0).sum()) > 50


def test_hearts_heuristic_plays_its_rules() -> None:
    states = hearts_positions(400, seed=2)
    obs = torch.tensor([s.information_state_tensor(s.current_player()) for s in states])
    mask = torch.tensor([s.legal_actions_mask(s.current_player()) for s in states], dtype=torch.bool)
    action = HeartsHeuristic()(obs, mask, torch.zeros(len(states), dtype=torch.int64), torch.Generator())
    dumped = 0
    for index, state in enumerate(states):
        legal = state.legal_actions()
        choice = int(action[index])
        assert choice in legal
        hand, led, passing = truth_from_engine(state)
        if passing:
            continue
        void = led >= 0 and all(card % 4 != led % 4 for card in legal)
        hearts = [card for card in legal if card % 4 == 2]
        if void and QUEEN_OF_SPADES in legal:
            assert choice == QUEEN_OF_SPADES
            dumped += 1
        elif void and hearts:
            assert choice == max(hearts)
            dumped += 1
        else:
            assert choice == min(legal)  # the lowest rank (cards are rank * 4 + suit)
    assert dumped > 5


def test_hearts_heuristic_passes_the_queen_of_spades_first() -> None:
    states = [s for s in hearts_positions(600, seed=3) if truth_from_engine(s)[2]]
    obs = torch.tensor([s.information_state_tensor(s.current_player()) for s in states])
    mask = torch.tensor([s.legal_actions_mask(s.current_player()) for s in states], dtype=torch.bool)
    action = HeartsHeuristic()(obs, mask, torch.zeros(len(states), dtype=torch.int64), torch.Generator())
    holding = mask[:, QUEEN_OF_SPADES]
    assert bool(holding.any())
    assert bool((action[holding] == QUEEN_OF_SPADES).all())


def connect_four_positions(count: int, seed: int) -> list:
    game, rng, states = pyspiel.load_game("connect_four"), random.Random(seed), []
    while len(states) < count:
        state = game.new_initial_state()
        while not state.is_terminal():
            states.append(state.clone())
            state.apply_action(rng.choice(state.legal_actions()))
    return states[:count]


def wins_now(state: object, column: int) -> bool:
    child = state.clone()
    child.apply_action(column)
    return child.is_terminal() and child.returns()[state.current_player()] > 0


def naive_threats(board: list[list[int]], piece: int) -> set[int]:
    """Columns where ``piece`` would complete four in a row, by plain loops over a rows x cols board (row 0 bottom)."""
    threats = set()
    for col in range(7):
        row = next((r for r in range(6) if board[r][col] == 0), None)
        if row is None:
            continue
        for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
            run = 1
            for sign in (1, -1):
                r, c = row + sign * dr, col + sign * dc
                while 0 <= r < 6 and 0 <= c < 7 and board[r][c] == piece:
                    run, r, c = run + 1, r + sign * dr, c + sign * dc
            if run >= 4:
                threats.add(col)
    return threats


def test_connect_four_heuristic_wins_blocks_or_goes_central() -> None:
    states = connect_four_positions(600, seed=0)
    obs = torch.tensor([s.observation_tensor(s.current_player()) for s in states]).reshape(-1, 3, 6, 7)
    seat = torch.tensor([s.current_player() for s in states])
    mask = torch.tensor([s.legal_actions_mask(s.current_player()) for s in states], dtype=torch.bool)
    action = ConnectFourHeuristic()(obs, mask, seat, torch.Generator())
    counts = {"win": 0, "block": 0}
    for index, state in enumerate(states):
        me = state.current_player()
        board = [[0] * 7 for _ in range(6)]
        for r in range(6):
            for c in range(7):
                board[r][c] = 1 if obs[index, me, r, c] else (2 if obs[index, 1 - me, r, c] else 0)
        wins = [c for c in state.legal_actions() if wins_now(state, c)]
        assert set(wins) == naive_threats(board, 1)  # the naive reference agrees with the engine
        choice = int(action[index])
        if wins:
            assert choice in wins
            counts["win"] += 1
        elif blocks := naive_threats(board, 2):
            assert choice in blocks
            counts["block"] += 1
        else:
            legal = state.legal_actions()
            assert abs(choice - 3) == min(abs(c - 3) for c in legal)
    assert counts["win"] > 10
    assert counts["block"] > 10


def test_connect_four_pettingzoo_layout_reads_the_same_board() -> None:
    pettingzoo = pytest.importorskip("pettingzoo")
    env = pettingzoo.make("aec", "classic/connect_four-v3")
    env.reset(seed=0)
    rng = random.Random(0)
    for _ in range(15):
        obs = env.observe(env.agent_selection)
        board = torch.tensor(obs["observation"]).unsqueeze(0)
        mine, theirs = boards(board, torch.zeros(1, dtype=torch.int64))
        flipped = board[0].flip(0)  # PettingZoo's row 0 is the top
        assert torch.equal(mine[0], flipped[..., 0] > 0)
        assert torch.equal(theirs[0], flipped[..., 1] > 0)
        assert int((mine | theirs)[0, 0].sum()) == int((board[0, 5] > 0).sum())  # bottom row: pieces landed there
        legal = [a for a, ok in enumerate(obs["action_mask"]) if ok]
        env.step(rng.choice(legal))
        if env.terminations[env.agent_selection]:
            break


def test_random_bot_is_legal_uniform_and_seeded() -> None:
    mask = torch.zeros(2000, 6, dtype=torch.bool)
    mask[:, [1, 4]] = True
    mask[:1000, 5] = True
    bot = RandomBot()
    first = bot(None, mask, torch.zeros(2000, dtype=torch.int64), torch.Generator().manual_seed(0))
    again = bot(None, mask, torch.zeros(2000, dtype=torch.int64), torch.Generator().manual_seed(0))
    assert torch.equal(first, again)
    assert bool(mask.gather(1, first.unsqueeze(1)).all())
    share = (first[1000:] == 1).float().mean()
    assert 0.45 < float(share) < 0.55
    assert 0.28 < float((first[:1000] == 5).float().mean()) < 0.39


def test_load_bot_by_class_path() -> None:
    assert isinstance(load_bot("rl_lightning.envs.games.bots.HeartsHeuristic"), HeartsHeuristic)
    assert isinstance(load_bot("rl_lightning.envs.games.bots:RandomBot"), RandomBot)


@pytest.mark.parametrize(("path", "message"), [
    ("my_pkg.bots:MyBot", "seats.1='my_pkg.bots:MyBot' does not import (ModuleNotFoundError: No module named"),
    ("rl_lightning.envs.games.bots.NoSuchBot", "does not import (AttributeError"),
    ("HeartsHeuristic", "is not a class path; write 'package.module.Class'"),
    ("rl_lightning.envs.games.bots.load_bot", "is not a class"),
    ("rl_lightning.envs.games.bots.hearts.NUM_CARDS", "is not a class"),
])  # fmt: skip
def test_bot_class_that_does_not_import_is_one_line(path: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_bot(path, "seats.1")
    assert message in str(err.value)
    assert "\n" not in str(err.value)
