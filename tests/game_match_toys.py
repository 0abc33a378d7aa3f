"""A tiny multi-seat card game with a known answer, for the match driver and the game-evaluation tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import EnvSpec, TorchEnv

CARDS = 10


class HighCard(TorchEnv):
    """Each seat is dealt a card 0..9 (the deal: drawn from the reset generator); seats act once each, in order.

    A seat chooses 0, 1 or 2 (2 is illegal when its card is odd). A game's ``game_score`` for seat s is
    ``card_s + action_s``, plus ``seat_bonus`` for seat 0 (a seat-order bias only rotation removes); with
    ``lower_is_better`` the score is negated and reported as ``points`` (lower is better, as in Hearts).
    Observation: one-hot card and one-hot seat of the acting seat.
    """

    def __init__(self, seats: int = 4, seat_bonus: float = 5.0, lower_is_better: bool = False) -> None:
        self.seats, self.seat_bonus = seats, seat_bonus
        self.score_lower_is_better = lower_is_better
        self.score_name = "points" if lower_is_better else "return"
        self.spec = EnvSpec(name="HighCard", obs_shape=(CARDS + seats,), discrete=True, num_actions=3,
                            has_action_mask=True, num_seats=seats)  # fmt: skip

    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        device = generator.device
        cards = torch.randint(0, CARDS, (num, self.seats), generator=generator, device=device)
        return TensorDict({"cards": cards, "tick": torch.zeros(num, dtype=torch.int64, device=device),
                           "played": torch.zeros(num, self.seats, dtype=torch.int64, device=device)},
                          batch_size=[num], device=device)  # fmt: skip

    def observe(self, state: TensorDict) -> TensorDict:
        seat = state["tick"] % self.seats
        card = state["cards"].gather(1, seat.unsqueeze(1)).squeeze(1)
        mask = torch.ones(*state.batch_size, 3, dtype=torch.bool, device=state.device)
        mask[:, 2] = card % 2 == 0
        obs = torch.cat([F.one_hot(card, CARDS), F.one_hot(seat, self.seats)], -1).float()
        return TensorDict({keys.OBS: obs, keys.ACTION_MASK: mask, keys.SEAT: seat,
                           keys.IS_FIRST: state["tick"] == 0}, batch_size=state.batch_size)  # fmt: skip

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        state = state.clone()
        num = state.batch_size[0]
        seat = state["tick"] % self.seats
        state["played"] = state["played"].scatter(1, seat.unsqueeze(1), action.unsqueeze(1))
        state["tick"] = state["tick"] + 1
        done = state["tick"] == self.seats
        score = (state["cards"] + state["played"]).float()
        score[:, 0] += self.seat_bonus
        score = torch.where(done.unsqueeze(1), -score if self.score_lower_is_better else score, 0.0)
        fresh = self.reset_state(num, generator)
        for key in ("cards", "tick", "played"):
            state[key] = torch.where(done.reshape(-1, *[1] * (state[key].dim() - 1)), fresh[key], state[key])
        out = self.observe(state)
        out.update({keys.REWARD: score, keys.TERMINATED: done, keys.TRUNCATED: torch.zeros_like(done),
                    "game_score": score})  # fmt: skip
        return state, out


class MaxBot:
    """Plays the highest legal action (the best move of ``HighCard``)."""

    def __call__(self, obs, action_mask, seat, generator):
        return (action_mask * torch.arange(action_mask.shape[-1], device=action_mask.device)).argmax(-1)


class MinBot:
    """Plays 0 (the worst move of ``HighCard``)."""

    def __call__(self, obs, action_mask, seat, generator):
        return torch.zeros(action_mask.shape[0], dtype=torch.int64, device=action_mask.device)


class CountingMinBot(MinBot):
    """``MinBot`` counting the rows it is asked to move for, over every instance (a search bot's cost)."""

    rows = 0

    def __call__(self, obs, action_mask, seat, generator):
        CountingMinBot.rows += int(action_mask.shape[0])
        return super().__call__(obs, action_mask, seat, generator)


def best_score(cards: torch.Tensor) -> torch.Tensor:
    """``MaxBot``'s score with card ``cards`` (2 more on even cards, 1 on odd)."""
    return (cards + 2 - cards % 2).float()



class StallCard(HighCard):
    """``HighCard`` of two seats with a step limit: a seat whose card is below ``stall_below`` and that plays 0
    acts again, so ``MinBot`` stalls on a low card until the game is cut at ``max_episode_steps`` ticks. A cut game
    reports the score so far as its ``game_score`` (0: the game pays at its end), as OpenSpiel's ``returns()``."""

    def __init__(self, seats: int = 2, stall_below: int = 3, max_episode_steps: int = 6) -> None:
        super().__init__(seats=seats, seat_bonus=0.0)
        self.stall_below = stall_below
        self.spec = EnvSpec(name="StallCard", obs_shape=(CARDS + seats,), discrete=True, num_actions=3,
                            has_action_mask=True, num_seats=seats, max_episode_steps=max_episode_steps)  # fmt: skip

    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        state = super().reset_state(num, generator)
        state["clock"] = torch.zeros(num, dtype=torch.int64, device=state.device)
        return state

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        state = state.clone()
        seat = state["tick"] % self.seats
        card = state["cards"].gather(1, seat.unsqueeze(1)).squeeze(1)
        moves = (card >= self.stall_below) | (action != 0)
        played = state["played"].scatter(1, seat.unsqueeze(1), action.unsqueeze(1))
        state["played"] = torch.where(moves.unsqueeze(1), played, state["played"])
        state["tick"] = state["tick"] + moves.long()
        state["clock"] = state["clock"] + 1
        done = state["tick"] == self.seats
        cut = ~done & (state["clock"] >= self.spec.max_episode_steps)
        score = torch.where(done.unsqueeze(1), (state["cards"] + state["played"]).float(), 0.0)
        fresh = self.reset_state(len(done), generator)
        for key in ("cards", "tick", "played", "clock"):
            ended = (done | cut).reshape(-1, *[1] * (state[key].dim() - 1))
            state[key] = torch.where(ended, fresh[key], state[key])
        out = self.observe(state)
        out.update({keys.REWARD: score, keys.TERMINATED: done, keys.TRUNCATED: cut, "game_score": score})
        return state, out
