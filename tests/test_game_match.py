"""The match driver: seats rotated, duplicate deals replayed, scores read per seat; PolicyBot; the rating fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats as sps

from rl_lightning.algos import PPO
from rl_lightning.errors import ConfigError
from rl_lightning.games.match import PolicyBot, play_games, play_match
from rl_lightning.games.rating import expected_score, fit_elo
from rl_lightning.games.stats import mean_interval
from rl_lightning.games.summary import match_metrics, pairwise_counts
from tests.game_match_toys import HighCard, MaxBot, MinBot, StallCard, best_score

BONUS = torch.tensor([5.0, 0.0, 0.0, 0.0])


def test_play_games_replays_deals_from_the_deal_seed() -> None:
    env = HighCard()
    first = play_games(env, [MinBot()] * 4, 37, deal_seed=3, seed=0, batch_size=8)
    again = play_games(env, [MinBot()] * 4, 37, deal_seed=3, seed=99, batch_size=8)
    other = play_games(env, [MinBot()] * 4, 37, deal_seed=4, seed=0, batch_size=8)
    assert first.shape == (37, 4)
    assert torch.equal(first, again)  # MinBot's score is its card: the same deals
    assert not torch.equal(first, other)


def test_duplicate_match_rotates_the_tested_seat_over_the_same_deals() -> None:
    result = play_match(HighCard(), MaxBot(), MinBot(), num_deals=40, seed=1, duplicate=True, batch_size=16)
    cards = result.baseline[:, 0] - BONUS  # an all-MinBot game scores each seat's card (+ seat 0's bonus)
    for r in range(4):
        expected = cards + BONUS
        expected[:, r] = best_score(cards[:, r]) + BONUS[r]
        assert torch.equal(result.tested[:, r], expected), f"rotation {r}"
    metrics = match_metrics(result)
    gain = (2 - cards % 2).mean(1)  # per deal: MaxBot's gain over MinBot in the same seat
    assert metrics["return_per_game"] == pytest.approx(float((cards + BONUS).mean() + gain.mean()))
    assert metrics["baseline_return_per_game"] == pytest.approx(float((cards + BONUS).mean()))
    assert metrics["games"] == 160
    assert metrics["p_value"] < 1e-10
    assert "win_rate" not in metrics  # four seats: no win/draw/loss


def test_non_duplicate_match_draws_fresh_deals_for_each_rotation() -> None:
    result = play_match(HighCard(), MaxBot(), MinBot(), num_deals=40, seed=1, duplicate=False, batch_size=16)
    assert not torch.equal(result.tested[:, 0, 2], result.tested[:, 1, 2])  # MinBot's card in seat 2 differs
    assert not torch.equal(result.baseline[:, 0], result.baseline[:, 1])
    metrics = match_metrics(result)
    assert metrics["games"] == 160
    assert metrics["p_value"] < 0.05  # Welch over 160 independent games
    # Duplicate deals cancel the cards' variance: the same gain is far more significant.
    duplicate = match_metrics(play_match(HighCard(), MaxBot(), MinBot(), num_deals=40, seed=1, batch_size=16))
    assert duplicate["p_value"] < metrics["p_value"] * 1e-6


def test_same_player_on_both_sides_scores_its_own_baseline() -> None:
    metrics = match_metrics(play_match(HighCard(), MaxBot(), MaxBot(), num_deals=20, seed=2))
    assert metrics["return_per_game"] == metrics["baseline_return_per_game"]
    assert metrics["p_value"] == 1.0


def test_lower_is_better_scores_are_points_per_hand() -> None:
    result = play_match(HighCard(lower_is_better=True), MaxBot(), MinBot(), num_deals=30, seed=0)
    metrics = match_metrics(result)
    assert metrics["points_per_hand"] < metrics["baseline_points_per_hand"]
    wins, ties, losses = pairwise_counts(result)
    assert wins + ties + losses == 30 * 4 * 3
    assert wins > losses  # fewer points won more comparisons


def test_two_seat_match_reports_win_draw_loss_with_wilson_intervals() -> None:
    result = play_match(HighCard(seats=2, seat_bonus=0.0), MaxBot(), MinBot(), num_deals=200, seed=3)
    cards = result.baseline[:, 0]  # [D, 2]
    own = best_score(cards)  # MaxBot's score in seat r, against MinBot's card in the other seat
    wins = int((own > cards.flip(1)).sum())
    losses = int((own < cards.flip(1)).sum())
    metrics = match_metrics(result)
    assert metrics["win_rate"] == pytest.approx(wins / 400)
    assert metrics["loss_rate"] == pytest.approx(losses / 400)
    assert metrics["draw_rate"] == pytest.approx(1 - (wins + losses) / 400)
    assert metrics["win_rate_low"] < metrics["win_rate"] < metrics["win_rate_high"]
    assert metrics["p_value_win_rate"] == pytest.approx(sps.binomtest(wins, wins + losses).pvalue)
    assert metrics["p_value_win_rate"] < 1e-3
    assert metrics["baseline_win_rate"] == pytest.approx(float((cards > cards.flip(1)).double().mean()))


def test_policy_bot_acts_legally_and_reproducibly_with_a_seed() -> None:
    env = HighCard()
    module = PPO(env_spec=env.spec, hidden_sizes=(8,)).eval()
    seen: list[torch.Tensor] = []

    class Checked(PolicyBot):
        def __call__(self, obs, action_mask, seat, generator):
            action = super().__call__(obs, action_mask, seat, generator)
            seen.append(action_mask.gather(1, action.unsqueeze(1)))
            return action

    sampled = [play_match(env, Checked(module, deterministic=False), MinBot(), 30, seed=5).tested for _ in range(2)]
    assert torch.equal(sampled[0], sampled[1])
    assert bool(torch.cat(seen).all())
    greedy = play_match(env, Checked(module, deterministic=True), MinBot(), 30, seed=5).tested
    assert not torch.equal(greedy, sampled[0])


def test_lineup_must_fill_every_seat() -> None:
    with pytest.raises(ConfigError, match="HighCard has 4 seats but the lineup names 2 players"):
        play_games(HighCard(), [MinBot(), MinBot()], 4, deal_seed=0, seed=0)


def test_hearts_heuristic_beats_random_over_duplicate_deals() -> None:
    pytest.importorskip("pyspiel")
    from rl_lightning.envs.games import OpenSpielEnv
    from rl_lightning.envs.games.bots import HeartsHeuristic, RandomBot

    env = OpenSpielEnv("open_spiel:hearts")
    heuristic = HeartsHeuristic()
    first = play_games(env, [heuristic] * 4, 16, deal_seed=7, seed=0)
    assert torch.equal(first, play_games(env, [heuristic] * 4, 16, deal_seed=7, seed=1))  # same deals, same play
    assert not torch.equal(first, play_games(env, [heuristic] * 4, 16, deal_seed=8, seed=0))
    assert env.live_count == 0  # every game released
    metrics = match_metrics(play_match(env, heuristic, RandomBot(), num_deals=60, seed=0))
    assert metrics["points_per_hand"] < metrics["baseline_points_per_hand"]
    assert metrics["p_value"] < 0.01


def test_fit_elo_recovers_known_ratings() -> None:
    truth = {"a": 0.0, "b": 200.0, "c": 500.0}
    names = list(truth)
    games = 20_000
    wins = np.zeros((3, 3))
    for i, x in enumerate(names):
        for j, y in enumerate(names):
            if i != j:
                wins[i, j] = games * expected_score(truth[x], truth[y])  # expected counts: the fit is exact
    ratings = fit_elo(names, wins, np.zeros((3, 3)), anchor="a", prior_draws=0.0)
    for name in names:
        assert ratings[name] == pytest.approx(truth[name], abs=1e-3)


def test_fit_elo_keeps_an_unbeaten_player_finite_and_rejects_bad_input() -> None:
    wins = np.array([[0.0, 50.0], [0.0, 0.0]])
    ratings = fit_elo(["strong", "weak"], wins, np.zeros((2, 2)))
    assert math.isfinite(ratings["strong"])
    assert ratings["strong"] > ratings["weak"]
    assert ratings["strong"] + ratings["weak"] == pytest.approx(0.0, abs=1e-9)  # no anchor: mean 0
    with pytest.raises(ValueError, match="anchor='nobody'"):
        fit_elo(["strong", "weak"], wins, np.zeros((2, 2)), anchor="nobody")


def test_rating_table_counts_each_pair_from_both_sides_and_orders_the_panel() -> None:
    from rl_lightning.envs.games.bots import RandomBot
    from rl_lightning.games.panel import Player, rating_table

    env = HighCard(seats=2, seat_bonus=0.0)
    strong, weak = Player("strong", MaxBot()), Player("weak", MinBot())
    played = play_match(env, strong.bot, weak.bot, 50, seed=4, baseline=False)  # reused, not replayed
    won, tied, lost = pairwise_counts(played)
    ratings = rating_table(env, [strong, weak], {("strong", "weak"): played}, 50, 0, True, 64)
    expected = fit_elo(["strong", "weak"], np.array([[0, won], [lost, 0]]), np.array([[0, tied], [tied, 0]]))
    assert ratings == pytest.approx(expected)
    panel = [Player("random", RandomBot()), strong, weak]
    table = rating_table(HighCard(), panel, {}, 40, 0, True, 64)  # four seats: every ordered pair plays
    assert table["random"] == 0.0
    assert table["strong"] > 0.0 > table["weak"]


def test_cut_games_are_counted_apart_and_left_out_of_every_result() -> None:
    """MinBot stalls on a card below 3 until the game is cut (its score so far, 0, is no result): the metrics count
    those games in ``games_cut`` and equal the metrics of the same deals' finished games, played without a limit."""
    full = play_match(StallCard(stall_below=0), MaxBot(), MinBot(), num_deals=200, seed=3)  # no game is cut
    result = play_match(StallCard(), MaxBot(), MinBot(), num_deals=200, seed=3)  # the same deals
    cards = full.baseline[:, 0]  # [D, 2]: an all-MinBot game scores each seat's card
    cut = cards.flip(1) < 3  # [D, r]: MaxBot in seat r, MinBot in the other seat with a low card stalls
    assert 0 < int(cut.sum()) < cut.numel()
    assert torch.equal(result.ended("tested"), ~cut)
    assert torch.equal(result.ended("baseline"), ~(cards < 3).any(1, keepdim=True).expand(-1, 2))
    assert torch.equal(result.seat_scores()[~cut], full.seat_scores()[~cut])
    metrics = match_metrics(result)
    assert metrics["games_cut"] == int(cut.sum())
    deals = (cards >= 3).all(1)  # duplicate: the deals whose rotations and baseline all ended
    assert metrics["games"] == 2 * int(deals.sum())
    sample = full.seat_scores()[deals].double().mean(1)
    interval = mean_interval(sample)
    assert (metrics["return_per_game"], metrics["return_per_game_low"], metrics["return_per_game_high"]) == (
        pytest.approx(interval.mean), pytest.approx(interval.low), pytest.approx(interval.high))
    assert metrics["baseline_return_per_game"] == pytest.approx(float(cards[deals].double().mean()))
    outcome = full.outcomes().sum(-1)[~cut]  # the rates: the tested player's games that ended
    assert metrics["win_rate"] == pytest.approx(float((outcome > 0).double().mean()))
    assert metrics["loss_rate"] == pytest.approx(float((outcome < 0).double().mean()))
    wins, ties, losses = pairwise_counts(result)
    assert (wins, ties, losses) == ((outcome > 0).sum(), (outcome == 0).sum(), (outcome < 0).sum())
    apart = match_metrics(play_match(StallCard(), MaxBot(), MinBot(), num_deals=200, seed=3, duplicate=False))
    assert apart["games"] + apart["games_cut"] == 400
    assert 0 < apart["games_cut"] < 400
    assert math.isfinite(apart["p_value"])


def test_a_match_whose_every_game_is_cut_has_no_result() -> None:
    metrics = match_metrics(play_match(StallCard(stall_below=10), MinBot(), MinBot(), num_deals=5, seed=0))
    assert (metrics["games"], metrics["games_cut"]) == (0, 10)
    for key in ("return_per_game", "return_per_game_low", "baseline_return_per_game", "p_value", "win_rate"):
        assert math.isnan(metrics[key]), key
