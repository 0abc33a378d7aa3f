"""Per-seat credit assignment for self-play rollouts of turn-based games (docs/guides/games.md), and GAE over it.

A ``[T, B]`` self-play rollout interleaves the decisions of several seats in each game (row ``b``). Each seat's
own decisions form its trajectory: a decision of seat ``s`` at tick ``t`` is credited with everything seat ``s``
receives from tick ``t`` (inclusive) until its next decision in the same game (exclusive) or the game's end; it
bootstraps from seat ``s``'s value at that next decision, from 0 when the game terminated first, and from
``V(final_obs[t_end, b, s])`` (the seat's own view of the last state) when the game was truncated first. A seat that
left the game before it was truncated (eliminated: ``seat_truncated`` False for it) was terminated: bootstrap 0; a
seat that left by its own truncation (``seat_truncated`` True) bootstraps from its final view however the game ended.
The γ of GAE applies per decision of the seat, not per tick.

The open tail: a decision whose seat neither decides again nor sees its game end before the rollout ends is
``open``. Its outcome lies in the next rollout, so it is not trained now: the collector carries it (its row, and
the reward it has received so far) into the next rollout, where it is credited in full (``open_tails`` finds
these rows; ``SelfPlayCollector`` carries them). The seat's earlier decisions bootstrap from the open decision's
value, which is exactly the rule above; their λ-recursion stops there (the usual truncated GAE of a rollout end).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class SeatCredit(NamedTuple):
    """What each row's decision is credited with (all ``[T, B]``).

    Attributes:
        reward: everything the acting seat received from this tick until its next decision or the game's end.
        next_value: the bootstrap: the seat's value at its next decision, ``V(final_obs)`` of the seat when the
            game was truncated first, 0 when it terminated first or the decision is open.
        terminated: the game terminated (or, with ``seat_truncated``, ended with the seat already out of it) before
            the seat decided again (bootstrap 0).
        truncated: the game was truncated, the seat still playing, before the seat decided again.
        next_row: the tick of the same seat's next decision in the same game; -1 where there is none in the rollout.
        open: the rollout ended before the seat decided again or its game ended.
    """

    reward: torch.Tensor
    next_value: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    next_row: torch.Tensor
    open: torch.Tensor


def seat_credit(
    seat: torch.Tensor,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    value: torch.Tensor,
    final_value: torch.Tensor | None = None,
    seat_truncated: torch.Tensor | None = None,
) -> SeatCredit:
    """Credit every decision of a ``[T, B]`` turn-based rollout to its own seat's trajectory.

    One backward pass over ``T`` keeps, per game and seat, what lies between tick ``t`` and that seat's next
    decision (the reward so far, the bootstrap value, how the chain ends); no loop over rows or seats.

    Args:
        seat: int64 ``[T, B]``, the seat that acted at each tick.
        reward: ``[T, B, S]``, what each seat received on each tick.
        terminated: bool ``[T, B]``, the game ended after tick ``t`` (bootstrap 0 for every seat).
        truncated: bool ``[T, B]``, the game was cut after tick ``t``.
        value: ``[T, B]``, the acting seat's value of its own observation.
        final_value: ``[T, B, S]``, each seat's value of its own view of the last state; read only for the seats
            cut on a game's last tick (``seat_truncated``, else every seat where ``truncated``; ``None`` when the env
            never truncates).
        seat_truncated: bool ``[T, B, S]``, on ticks where a game ended: the seats still playing when it was cut
            (the others were terminated); ``None``: every seat ends as its game does.
    """
    steps, batch, seats = reward.shape
    dtype = value.dtype
    if final_value is None:
        final_value = torch.zeros_like(reward, dtype=dtype)
    acting = torch.nn.functional.one_hot(seat, seats).bool()  # [T, B, S]
    # Per (game, seat): the chain from tick t to the seat's next decision, built backwards.
    acc = torch.zeros(batch, seats, dtype=reward.dtype, device=reward.device)
    boot = torch.zeros(batch, seats, dtype=dtype, device=value.device)
    term = torch.zeros(batch, seats, dtype=torch.bool, device=value.device)
    trunc = torch.zeros_like(term)
    nxt = torch.full((batch, seats), -1, dtype=torch.int64, device=value.device)
    is_open = torch.ones_like(term)
    out = [torch.empty(steps, batch, dtype=t.dtype, device=t.device) for t in (acc, boot, term, trunc, nxt, is_open)]
    for t in range(steps - 1, -1, -1):
        ended = (terminated[t] | truncated[t]).unsqueeze(-1)  # the game ends after this tick: a fresh chain
        if seat_truncated is None:
            cut, final = truncated[t].unsqueeze(-1), terminated[t].unsqueeze(-1)
        else:  # per seat: cut while playing, or out of the game (terminated) before the cut
            cut = seat_truncated[t] & ended
            final = ended & ~cut
        acc = acc.masked_fill(ended, 0.0) + reward[t]
        boot = torch.where(ended, torch.where(cut, final_value[t].to(dtype), 0.0), boot)
        term = torch.where(ended, final, term)
        trunc = torch.where(ended, cut, trunc)
        nxt = nxt.masked_fill(ended, -1)
        is_open = is_open & ~ended
        here = acting[t]
        for buffer, chain in zip(out, (acc, boot, term, trunc, nxt, is_open)):
            buffer[t] = (chain * here).sum(-1) if chain.dtype != torch.bool else (chain & here).any(-1)
        # The acting seat's earlier decisions now end at this one.
        acc = acc.masked_fill(here, 0.0)
        boot = torch.where(here, value[t].unsqueeze(-1), boot)
        term, trunc, is_open = term & ~here, trunc & ~here, is_open & ~here
        nxt = torch.where(here, t, nxt)
    credit_reward, next_value, out_term, out_trunc, next_row, open_ = out
    next_value = next_value.masked_fill(open_, 0.0)
    return SeatCredit(credit_reward, next_value, out_term, out_trunc, next_row, open_)


def seat_gae(credit: SeatCredit, value: torch.Tensor, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(λ) along each seat's own decisions; ``(advantage, value_target)``, both ``[T, B]``.

    The recursion of ``generalized_advantage_estimate`` with ``t + 1`` replaced by the seat's next decision
    (``credit.next_row``); a chain that ends (game over, or the rollout) stops it. Open decisions get advantage
    0 (they are not trained in this rollout), so the decision before them bootstraps from their value alone.
    """
    steps, batch = value.shape
    not_terminal = (~credit.terminated).to(value.dtype)
    delta = credit.reward.to(value.dtype) + gamma * not_terminal * credit.next_value - value
    delta = delta.masked_fill(credit.open, 0.0)
    advantage = torch.zeros(steps + 1, batch, dtype=value.dtype, device=value.device)  # row T: "no next decision"
    follow = credit.next_row.masked_fill(credit.next_row < 0, steps)
    for t in range(steps - 1, -1, -1):
        advantage[t] = delta[t] + gamma * lam * advantage.gather(0, follow[t].unsqueeze(0)).squeeze(0)
    advantage = advantage[:steps]
    return advantage, advantage + value


def open_tails(
    seat: torch.Tensor, reward: torch.Tensor, done: torch.Tensor, num_seats: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each (game, seat)'s open decision at the end of a ``[T, B]`` rollout, for carrying into the next one.

    Returns ``(row, has, partial)``, each ``[B, S]``: the tick of the seat's last decision when it came after the
    game's last end in the rollout (so its chain is still open), whether there is one, and the reward the seat has
    received from that tick to the rollout's end (its credited reward so far). The rows equal those that
    ``seat_credit`` flags ``open``.
    """
    steps = seat.shape[0]
    ticks = torch.arange(steps, device=seat.device).unsqueeze(-1)  # [T, 1]
    last_end = torch.where(done, ticks, -1).amax(0)  # [B]
    acting = torch.nn.functional.one_hot(seat, num_seats).bool()  # [T, B, S]
    last_decision = torch.where(acting, ticks.unsqueeze(-1), -1).amax(0)  # [B, S]
    has = last_decision > last_end.unsqueeze(-1)
    row = last_decision.clamp(min=0)
    from_tick = reward.flip(0).cumsum(0).flip(0)  # [T, B, S]: reward from tick t to the end
    partial = from_tick.gather(0, row.unsqueeze(0)).squeeze(0) * has
    return row, has, partial
