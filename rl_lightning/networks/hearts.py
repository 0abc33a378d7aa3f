"""``HeartsFeatures``: OpenSpiel Hearts' information state decoded into a compact view of the acting seat.

A fixed decoding (no parameters) that sits first in the policy as the ``hearts`` encoder (``model.encoder: hearts``),
so the network reads a few hundred features instead of 5,088 while the policy, its checkpoint and its exported
graph still take exactly the tensor OpenSpiel gives any caller. It reads only that tensor, so it knows only what
the seat may know.

The tensor (``information_state_tensor``; open_spiel/games/hearts/hearts.cc ``InformationStateTensor``, the same
from v1.x to 2.0.2; cards are ``rank * 4 + suit``, suits clubs, diamonds, hearts, spades, ranks 2..A):

====================  ==========  ====================================================================================
field                 offset      contents
====================  ==========  ====================================================================================
pass direction        0 (4)       one-hot: no pass, left, across, right (a seat passes to seat + direction)
dealt hand            4 (52)      the seat's 13 dealt cards
passed cards          56 (52)     the cards it passed
received cards        108 (52)    the cards passed to it, once every seat has passed
current hand          160 (52)
points                212 (4x36)  each seat's points so far (seats N E S W), a thermometer of points + 10 ones
tricks                356 (13x7x52) per trick 7 slots (seats N E S W N E S); its first card in its leader's slot,
                                  the next ones in the following slots
====================  ==========  ====================================================================================

The acting seat is not in the tensor: it is the seat whose slots hold the cards it no longer has (dealt, less
passed, plus received, less the current hand); before its first card it is the seat after the current trick's last
card (when it leads the first trick nothing has been played, and every seat-relative feature is the same whichever
seat it is). Features, seats counted from the acting seat (0 itself, 1 the next to play, 2 across, 3 the last),
``OUT_DIM`` = 516 in this order:

hand (52); pass direction (4); passing now (1); passed (52); received (52); the current trick's cards of seats 1, 2,
3 (3x52); the led suit (4); cards already in the trick (one-hot 0..3, 4); cards played in finished tricks (52);
points taken by seats 0..3 (4, /26); points in the current trick (1, /26); suits each seat 0..3 has shown void in
(4x4: it did not follow a led suit); hearts broken (1: a heart played, or the queen of spades with
``qs_breaks_hearts``; always 1 without ``must_break_hearts``); cards this seat passed that are not yet played (52:
held by seat ``direction``); cards still out (52: neither in the hand nor played); the trick number (one-hot 13).

OpenSpiel's rule variants (``game_kwargs``, carried to the encoder as ``EnvSpec.game_params``): ``qs_breaks_hearts``
and ``must_break_hearts`` decide "hearts broken" and ``jd_bonus`` the points in the current trick (the jack of
diamonds counts -10), so the decoding is built for them (``for_rules``); ``pass_cards``, ``no_pts_on_first_trick``,
``can_lead_any_club``, ``can_lead_hearts_instead_of_qs`` change only which moves are legal (the action mask) and
``avoid_all_tricks_bonus`` only the final score, so no feature depends on them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

NUM_CARDS, NUM_SEATS, NUM_TRICKS, SLOTS = 52, 4, 13, 7
POINT_WIDTH, POINT_OFFSET = 36, 10  # thermometer of points + 10 (the jack of diamonds' -10 bonus keeps it >= 0)
QUEEN_OF_SPADES, JACK_OF_DIAMONDS, HEARTS = 43, 37, 2
#: The rule parameters the features depend on, with OpenSpiel's defaults (module docstring).
RULES = {"qs_breaks_hearts": True, "must_break_hearts": True, "jd_bonus": False}
_DEALT, _PASSED, _RECEIVED, _HAND, _POINTS, _TRICKS = 4, 56, 108, 160, 212, 356
INFO_STATE_SIZE = _TRICKS + NUM_TRICKS * SLOTS * NUM_CARDS  # 5,088
OUT_DIM = 52 + 4 + 1 + 52 + 52 + 3 * 52 + 4 + 4 + 52 + 4 + 1 + 16 + 1 + 52 + 52 + 13


def _suits(cards: torch.Tensor) -> torch.Tensor:
    """``[..., 52]`` card indicators → ``[..., 4]`` per-suit counts (cards are ``rank * 4 + suit``)."""
    return cards.reshape(*cards.shape[:-1], NUM_TRICKS, 4).sum(-2)


def _first(filled: torch.Tensor) -> torch.Tensor:
    """Index of the first true entry along the last dim (0 when none): ``argmax`` returns the first maximum."""
    return filled.float().argmax(-1)


def _mod4(value: torch.Tensor) -> torch.Tensor:
    """``value % 4`` for integer-valued tensors, written so every exporter keeps it (no integer ``Mod``)."""
    return value - 4 * torch.floor(value / 4)


class HeartsFeatures(nn.Module):
    """``[..., 5088]`` Hearts information states → ``[..., 516]`` features of the acting seat (module docstring)."""

    in_shape = (INFO_STATE_SIZE,)
    out_dim = OUT_DIM

    def __init__(self, qs_breaks_hearts: bool = True, must_break_hearts: bool = True, jd_bonus: bool = False) -> None:
        super().__init__()
        self.qs_breaks_hearts, self.must_break_hearts = bool(qs_breaks_hearts), bool(must_break_hearts)
        cards = torch.arange(NUM_CARDS)
        points = torch.where(cards % 4 == HEARTS, 1.0, 0.0)
        points[QUEEN_OF_SPADES] = 13.0
        points[JACK_OF_DIAMONDS] = -10.0 if jd_bonus else 0.0
        self.register_buffer("card_points", points, persistent=False)  # not in the state dict: a fixed decoding
        self.register_buffer("seats", torch.arange(NUM_SEATS, dtype=torch.float32), persistent=False)

    @classmethod
    def for_rules(cls, game_params: dict) -> HeartsFeatures:
        """The decoding of a Hearts variant: ``game_params`` (``EnvSpec.game_params``) with ``RULES``' defaults."""
        return cls(**{name: game_params.get(name, default) for name, default in RULES.items()})

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[:-1]
        x = obs.reshape(-1, INFO_STATE_SIZE).float()
        hand = x[:, _HAND : _HAND + NUM_CARDS]
        passed = x[:, _PASSED : _PASSED + NUM_CARDS]
        received = x[:, _RECEIVED : _RECEIVED + NUM_CARDS]
        pass_dir = x[:, :4]
        # Each reduction reads the 4,732 trick slots once and the current trick is a gather; everything after works on
        # small tensors (30 ms for 2,048 rows on one thread, against 81 ms for one-hot masks over all 13 tricks).
        slots = x[:, _TRICKS:].reshape(-1, NUM_TRICKS, SLOTS, NUM_CARDS)
        seat_cards = _fold(slots.sum(1))  # [N, 4, 52]: each seat's cards played this hand
        played = seat_cards.sum(1)  # [N, 52]
        count = played.sum(-1)  # cards played in the hand
        trick = torch.clamp(torch.floor(count / 4), max=NUM_TRICKS - 1)  # the current trick (empty when leading)
        in_trick = count - 4 * torch.floor(count / 4)
        index = trick.long()[:, None, None, None].expand(-1, 1, SLOTS, NUM_CARDS)
        current_slots = torch.gather(slots, 1, index).squeeze(1)  # [N, 7, 52]
        current = _fold(current_slots)  # [N, 4, 52] by absolute seat
        leader = _first(current_slots.sum(-1) > 0).float()  # the current trick's leader (0 when empty)
        mine = (x[:, _DEALT : _DEALT + NUM_CARDS] - passed + received) * (1.0 - hand)  # cards this seat played
        votes = (seat_cards * mine.unsqueeze(1)).sum(-1)  # [N, 4]: this seat's cards in each seat's slots
        me = torch.where(votes.sum(-1) > 0, _first(votes > 0).float(), _mod4(leader + in_trick))
        # rotate[n, r, a] = 1 where absolute seat a is seat r counted from the acting seat.
        rotate = (_mod4(me.unsqueeze(-1) + self.seats).unsqueeze(-1) == self.seats).float()  # [N, 4, 4]
        led = torch.gather(current_slots, 1, leader.long()[:, None, None].expand(-1, 1, NUM_CARDS)).squeeze(1)
        led_suit = _suits(led) * (in_trick > 0).unsqueeze(-1).float()
        points = x[:, _POINTS : _POINTS + 4 * POINT_WIDTH].reshape(-1, 4, POINT_WIDTH).sum(-1)
        points = (rotate @ (points - POINT_OFFSET).unsqueeze(-1)).squeeze(-1) / 26.0
        current_rel = (rotate @ current)[:, 1:].reshape(-1, 3 * NUM_CARDS)
        voids = (rotate @ _voids(slots)).reshape(-1, 16)
        breakers = _suits(played)[:, HEARTS] + (played[:, QUEEN_OF_SPADES] if self.qs_breaks_hearts else 0.0)
        broken = (breakers > 0).float().unsqueeze(-1) if self.must_break_hearts else torch.ones_like(count[:, None])
        not_received = (received.sum(-1, keepdim=True) == 0).float()
        passing = (1.0 - pass_dir[:, :1]) * not_received * (count == 0).float().unsqueeze(-1)
        trick_hot = (trick.unsqueeze(-1) == torch.arange(NUM_TRICKS, device=x.device)).float()
        features = [
            hand, pass_dir, passing, passed, received, current_rel, led_suit,
            (in_trick.unsqueeze(-1) == self.seats).float(), played - current.sum(1), points,
            (current.sum(1) @ self.card_points).unsqueeze(-1) / 26.0, voids, broken,
            passed * (1.0 - played), torch.clamp(1.0 - hand - played, min=0.0), trick_hot,
        ]  # fmt: skip
        return torch.cat(features, -1).reshape(*lead, OUT_DIM)


def _fold(slots: torch.Tensor) -> torch.Tensor:
    """``[..., 7, C]`` slots (seats N E S W N E S) → ``[..., 4, C]`` per seat."""
    return slots[..., :NUM_SEATS, :] + F.pad(slots[..., NUM_SEATS:, :], (0, 0, 0, 1))


def _voids(slots: torch.Tensor) -> torch.Tensor:
    """``[N, 4, 4]``: whether absolute seat ``s`` has shown void in suit ``u`` (played off a led suit)."""
    suits = slots.reshape(*slots.shape[:-1], NUM_TRICKS, 4).sum(-2)  # [N, 13, 7, 4]: each slot's card's suit
    leader = _first(suits.sum(-1) > 0)  # [N, 13]: each trick's first filled slot
    led_suit = torch.gather(suits, 2, leader[:, :, None, None].expand(-1, -1, 1, 4)).squeeze(2)  # [N, 13, 4]
    seat_suits = _fold(suits)  # [N, 13, 4, 4]: the suit of each seat's card in each trick
    followed = (seat_suits * led_suit.unsqueeze(2)).sum(-1)  # [N, 13, 4]
    off_suit = seat_suits.sum(-1) * (1.0 - followed)  # the seat played a card, not of the led suit
    return torch.clamp((off_suit.unsqueeze(-1) * led_suit.unsqueeze(2)).sum(1), max=1.0)
