"""Per-seat credit and GAE against the naive reference: group decisions by (game, seat), sort by tick, plain GAE."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.objectives import generalized_advantage_estimate
from rl_lightning.objectives.seat_credit import open_tails, seat_credit, seat_gae

GAMMA, LAM = 0.97, 0.9


def naive_reference(seat, reward, terminated, truncated, value, final_value, gamma=GAMMA, lam=LAM):
    """Loops over games, seats and decisions, as the product was specified; returns dicts keyed by (t, b)."""
    steps, batch, seats = reward.shape
    credit, advantage, opened = {}, {}, set()
    for b in range(batch):
        games, start = [], 0
        for t in range(steps):
            if terminated[t, b] or truncated[t, b]:
                games.append((start, t, True))
                start = t + 1
        if start < steps:
            games.append((start, steps - 1, False))
        for first, last, ended in games:
            for s in range(seats):
                ticks = sorted(t for t in range(first, last + 1) if seat[t, b] == s)
                rows = []
                for i, t in enumerate(ticks):
                    is_last = i == len(ticks) - 1
                    until = last if is_last else ticks[i + 1] - 1
                    r = float(reward[t : until + 1, b, s].sum())
                    if not is_last:
                        rows.append((t, r, float(value[ticks[i + 1], b]), False, False))
                    elif not ended:
                        opened.add((t, b))
                        rows.append((t, r, 0.0, False, True))
                    elif terminated[last, b]:
                        rows.append((t, r, 0.0, True, False))
                    else:
                        rows.append((t, r, float(final_value[last, b, s]), False, False))
                running = 0.0
                for t, r, boot, term, is_open in reversed(rows):
                    credit[(t, b)] = (r, boot, term)
                    if is_open:
                        running = 0.0
                    else:
                        running = r + gamma * (0.0 if term else boot) - float(value[t, b]) + gamma * lam * running
                    advantage[(t, b)] = running
    return credit, advantage, opened


def random_rollout(seed, steps=41, batch=6, seats=3, p_end=0.08):
    g = torch.Generator().manual_seed(seed)
    seat = torch.randint(0, seats, (steps, batch), generator=g)
    # Sparse rewards to any seat on any tick, mostly to seats that are not acting.
    reward = torch.randn(steps, batch, seats, generator=g, dtype=torch.float64) * (
        torch.rand(steps, batch, seats, generator=g) < 0.4
    )
    ended = torch.rand(steps, batch, generator=g) < p_end
    truncated = ended & (torch.rand(steps, batch, generator=g) < 0.4)
    terminated = ended & ~truncated
    value = torch.randn(steps, batch, generator=g, dtype=torch.float64)
    final_value = torch.randn(steps, batch, seats, generator=g, dtype=torch.float64)
    return seat, reward, terminated, truncated, value, final_value


def check_against_reference(seat, reward, terminated, truncated, value, final_value):
    credit = seat_credit(seat, reward, terminated, truncated, value, final_value)
    advantage, target = seat_gae(credit, value, GAMMA, LAM)
    ref_credit, ref_adv, ref_open = naive_reference(seat, reward, terminated, truncated, value, final_value)
    steps, batch = seat.shape
    assert len(ref_credit) == steps * batch
    for (t, b), (r, boot, term) in ref_credit.items():
        assert float(credit.reward[t, b]) == pytest.approx(r, abs=1e-9), (t, b)
        assert float(credit.next_value[t, b]) == pytest.approx(boot, abs=1e-9), (t, b)
        assert bool(credit.terminated[t, b]) == term, (t, b)
        assert bool(credit.open[t, b]) == ((t, b) in ref_open), (t, b)
        assert float(advantage[t, b]) == pytest.approx(ref_adv[(t, b)], abs=1e-9), (t, b)
    torch.testing.assert_close(target, advantage + value)
    return credit


@pytest.mark.parametrize("seed", range(4))
def test_matches_naive_per_game_seat_loop_on_random_rollouts(seed):
    check_against_reference(*random_rollout(seed))


def test_reward_on_another_seats_turn_and_game_ending_on_another_seats_move():
    # One game of two seats: seat 0 acts at ticks 0, 2; seat 1 at 1, 3. Seat 0 is paid 5 on seat 1's tick 1,
    # and the game terminates on seat 1's move at tick 3, paying seat 0 another +1 and seat 1 -1.
    seat = torch.tensor([[0], [1], [0], [1]])
    reward = torch.zeros(4, 1, 2, dtype=torch.float64)
    reward[1, 0, 0] = 5.0
    reward[3, 0] = torch.tensor([1.0, -1.0], dtype=torch.float64)
    terminated = torch.tensor([[False], [False], [False], [True]])
    truncated = torch.zeros_like(terminated)
    value = torch.tensor([[0.1], [0.2], [0.3], [0.4]], dtype=torch.float64)
    credit = check_against_reference(seat, reward, terminated, truncated, value, torch.zeros(4, 1, 2))
    # Seat 0's first decision: its reward from ticks 0-1 (the 5 paid on seat 1's turn), bootstrap V at tick 2.
    assert credit.reward[:, 0].tolist() == [5.0, 0.0, 1.0, -1.0]
    assert credit.next_value[:, 0].tolist() == [0.3, 0.4, 0.0, 0.0]
    # The game ended on seat 1's move: seat 0's last decision (tick 2) terminated without deciding again.
    assert credit.terminated[:, 0].tolist() == [False, False, True, True]


def test_truncation_bootstraps_each_seat_from_its_own_final_view():
    seat = torch.tensor([[0], [1], [0]])
    reward = torch.zeros(3, 1, 2, dtype=torch.float64)
    truncated = torch.tensor([[False], [False], [True]])
    final_value = torch.zeros(3, 1, 2, dtype=torch.float64)
    final_value[2, 0] = torch.tensor([7.0, -3.0], dtype=torch.float64)
    value = torch.zeros(3, 1, dtype=torch.float64)
    credit = check_against_reference(seat, reward, torch.zeros_like(truncated), truncated, value, final_value)
    assert credit.next_value[:, 0].tolist() == [0.0, -3.0, 7.0]  # seat 1 at tick 1 bootstraps from its own view
    assert credit.truncated[:, 0].tolist() == [False, True, True]


def test_open_tail_is_flagged_and_matches_open_tails():
    for seed in range(3):
        seat, reward, terminated, truncated, value, final_value = random_rollout(seed, steps=13, seats=4)
        credit = check_against_reference(seat, reward, terminated, truncated, value, final_value)
        row, has, partial = open_tails(seat, reward, terminated | truncated, 4)
        flagged = torch.zeros_like(credit.open)
        for b in range(seat.shape[1]):
            for s in range(4):
                if has[b, s]:
                    t = int(row[b, s])
                    flagged[t, b] = True
                    assert int(seat[t, b]) == s
                    assert float(partial[b, s]) == pytest.approx(float(credit.reward[t, b]))
        assert torch.equal(flagged, credit.open)


def test_one_seat_equals_plain_gae_before_the_open_tail():
    seat, reward, terminated, truncated, value, _ = random_rollout(5, seats=1)
    terminated[-1] = truncated[-1] = False  # the last tick is then the one open decision of each row
    final_value = torch.randn(*reward.shape, dtype=torch.float64)
    next_value = torch.cat([value[1:], value[-1:]])
    next_value = torch.where(truncated, final_value[..., 0], next_value)
    credit = seat_credit(seat, reward, terminated, truncated, value, final_value)
    advantage, _ = seat_gae(credit, value, GAMMA, LAM)
    assert credit.open[-1].all()
    assert not credit.open[:-1].any()
    # Plain GAE on ticks 0..T-2, its last tick cut and bootstrapped from V at T-1: the single-agent rollout end.
    cut = truncated[:-1].clone()
    cut[-1] = True
    plain, _ = generalized_advantage_estimate(
        reward[:-1, :, 0], value[:-1], next_value[:-1], terminated[:-1], cut, GAMMA, LAM
    )
    torch.testing.assert_close(advantage[:-1], plain)
