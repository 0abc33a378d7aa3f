"""A Hearts baseline bot read from OpenSpiel's ``information_state_tensor`` (the acting seat's view).

The tensor layout (open_spiel/games/hearts/hearts.cc, ``InformationStateTensor``; cards are ``rank * 4 + suit``
with suits clubs, diamonds, hearts, spades and ranks 2..A, so the queen of spades is 43): the pass direction
one-hot (4; 0 = no pass), the dealt hand (52), the cards this seat passed (52), the cards it received (52, filled
once every seat has passed), its current hand (52), each seat's points as a 36-long thermometer (4 x 36), then 13
tricks of 7 x 52 slots (seats N E S W N E S, the trick's first card in its leader's slot).
"""

from __future__ import annotations

import torch

NUM_CARDS = 52
QUEEN_OF_SPADES = 43
HEARTS_SUIT = 2
_PASS_DIR = slice(0, 4)
_RECEIVED = slice(108, 160)
_HAND = slice(160, 212)
_TRICKS = 356
_TRICK_SLOTS = 7
INFO_STATE_SIZE = _TRICKS + 13 * _TRICK_SLOTS * NUM_CARDS  # 5,088


def decode(obs: torch.Tensor) -> dict[str, torch.Tensor]:
    """The fields the heuristic reads, from ``[B, 5088]`` information state tensors of the acting seats.

    Returns:
        ``hand`` bool ``[B, 52]`` the seat's cards; ``passing`` bool ``[B]`` it is choosing cards to pass;
        ``led`` int64 ``[B]`` the card that opened the current trick, -1 when the seat leads (or passes).
    """
    if obs.shape[-1] != INFO_STATE_SIZE:
        raise ValueError(f"HeartsHeuristic reads OpenSpiel hearts information_state_tensor rows of {INFO_STATE_SIZE} "
                         f"values, got shape {tuple(obs.shape)}; use env_id open_spiel:hearts")  # fmt: skip
    hand = obs[:, _HAND] > 0
    passing = (obs[:, 0] == 0) & ~(obs[:, _RECEIVED] > 0).any(-1)
    # The acting seat has not played in the current trick, so it holds 13 - (completed tricks) cards.
    current = (13 - hand.sum(-1)).clamp(0, 12)
    tricks = obs[:, _TRICKS:].reshape(-1, 13, _TRICK_SLOTS, NUM_CARDS)
    trick = tricks[torch.arange(obs.shape[0], device=obs.device), current] > 0  # [B, 7, 52]
    filled = trick.any(-1)  # [B, 7] slots holding a card
    first = filled.int().argmax(-1)  # the leader's slot: the first filled one
    led_card = trick[torch.arange(obs.shape[0], device=obs.device), first].int().argmax(-1)
    led = torch.where(filled.any(-1) & ~passing, led_card, -1)
    return {"hand": hand, "passing": passing, "led": led}


class HeartsHeuristic:
    """The simple Hearts baseline: play the lowest legal card; when void in the led suit, dump the queen of
    spades, else the highest heart, else the lowest legal card; when passing, give away the queen, ace and king of
    spades, then the highest hearts, then the highest other cards. Against three uniformly random seats it takes
    4.77 ± 0.27 points per hand without passing (``pass_cards: false``; the issue's "about 4.8") and 3.74 ± 0.24
    with OpenSpiel's default passing, where giving the queen away pays off (random seats: 6.5; 2,000 hands,
    ``benchmarks/games/games.py --sections bots``). Deterministic: ``generator`` is unused.
    """

    def __call__(
        self, obs: torch.Tensor, action_mask: torch.Tensor, seat: torch.Tensor, generator: torch.Generator
    ) -> torch.Tensor:
        view = decode(obs)
        cards = torch.arange(NUM_CARDS, device=action_mask.device)
        suit, rank = cards % 4, cards // 4
        big = NUM_CARDS * 10
        lowest = torch.where(action_mask, cards, big).argmin(-1)
        heart_legal = action_mask & (suit == HEARTS_SUIT)
        highest_heart = torch.where(heart_legal, cards, -1).argmax(-1)
        led_suit = torch.where(view["led"] >= 0, view["led"] % 4, -1)
        follows = (action_mask & (suit == led_suit.unsqueeze(-1))).any(-1)
        void = (view["led"] >= 0) & ~follows
        queen_legal = action_mask[:, QUEEN_OF_SPADES]
        dump = torch.where(queen_legal, QUEEN_OF_SPADES, torch.where(heart_legal.any(-1), highest_heart, lowest))
        play = torch.where(void, dump, lowest)
        danger = torch.zeros(NUM_CARDS, device=action_mask.device)
        danger[[QUEEN_OF_SPADES, 51, 47]] = torch.tensor([300.0, 200.0, 100.0], device=action_mask.device)
        pass_score = danger + rank + 20.0 * (suit == HEARTS_SUIT)
        give = torch.where(action_mask, pass_score, -1.0).argmax(-1)
        return torch.where(view["passing"], give, play)
