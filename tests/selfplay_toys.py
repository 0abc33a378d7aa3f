"""A tiny torch-native multi-seat turn-based game following the contract of DESIGN.md §10, for self-play tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import EnvSpec, TorchEnv


class TurnToy(TorchEnv):
    """``seats`` seats take turns; a random seat starts each game; games have random lengths.

    Each tick the acting seat picks 0, 1 or 2 (2 is illegal on odd ticks). The seat that acted before it is paid
    ``0.5 · action`` (a reward on another seat's turn); a 0 costs the acting seat 0.1. Action 2 skips the next seat.
    Each tick the game terminates with probability ``p_end`` (drawn from the generator), paying +1 to the seat with
    the highest score and -1 to the others (so a game often ends on another seat's move); with
    ``max_episode_steps`` it is truncated at that many ticks and every step carries ``final_obs`` ``[B, S, obs]``.

    Observation of a seat: one-hot seat, the tick / 10, its own score then the others' (rotated), float32.
    """

    def __init__(self, seats: int = 3, p_end: float = 0.15, max_episode_steps: int = 0) -> None:
        self.seats = seats
        self.p_end = p_end
        self.spec = EnvSpec(
            name="TurnToy", obs_shape=(2 * seats + 1,), discrete=True, num_actions=3, has_action_mask=True,
            max_episode_steps=max_episode_steps, num_seats=seats, perfect_information=True,
        )  # fmt: skip

    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        device = generator.device
        return TensorDict(
            {
                "seat": torch.randint(0, self.seats, (num,), generator=generator, device=device),
                "tick": torch.zeros(num, dtype=torch.int64, device=device),
                "score": torch.zeros(num, self.seats, device=device),
            },
            batch_size=[num],
            device=device,
        )

    def _view(self, state: TensorDict, seat: torch.Tensor) -> torch.Tensor:
        order = (seat.unsqueeze(-1) + torch.arange(self.seats, device=seat.device)) % self.seats
        own_first = state["score"].gather(-1, order)
        tick = state["tick"].unsqueeze(-1).float() / 10.0
        return torch.cat([F.one_hot(seat, self.seats).float(), tick, own_first], -1)

    def observe(self, state: TensorDict) -> TensorDict:
        mask = torch.ones(*state.batch_size, 3, dtype=torch.bool, device=state.device)
        mask[:, 2] = state["tick"] % 2 == 0
        return TensorDict(
            {keys.OBS: self._view(state, state["seat"]), keys.ACTION_MASK: mask, keys.SEAT: state["seat"].clone()},
            batch_size=state.batch_size,
        )

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        state = state if inplace else state.clone()
        num, seats, device = state.batch_size[0], self.seats, state.device
        seat = state["seat"]
        reward = torch.zeros(num, seats, device=device)
        previous = (seat - 1) % seats
        reward.scatter_add_(1, previous.unsqueeze(1), 0.5 * action.float().unsqueeze(1))
        reward.scatter_add_(1, seat.unsqueeze(1), -0.1 * (action == 0).float().unsqueeze(1))
        state["score"] = state["score"] + reward
        state["tick"] = state["tick"] + 1
        state["seat"] = (seat + 1 + (action == 2).long()) % seats
        terminated = torch.rand(num, generator=generator, device=device) < self.p_end
        best = F.one_hot(state["score"].argmax(-1), seats).float()
        reward = reward + terminated.unsqueeze(-1) * (2 * best - 1)
        limit = self.spec.max_episode_steps
        truncated = (state["tick"] >= limit) & ~terminated if limit > 0 else torch.zeros_like(terminated)
        done = terminated | truncated
        out = {keys.REWARD: reward, keys.TERMINATED: terminated, keys.TRUNCATED: truncated}
        if limit > 0:
            every = torch.arange(seats, device=device)
            views = [self._view(state, every[s].expand(num)) for s in range(seats)]
            out[keys.FINAL_OBS] = torch.stack(views, 1)
        fresh = self.reset_state(num, generator)
        for key in ("seat", "tick", "score"):
            state[key] = torch.where(done.reshape(-1, *[1] * (state[key].dim() - 1)), fresh[key], state[key])
        view = self.observe(state)
        out.update(dict(view.items()))
        out[keys.IS_FIRST] = done
        return state, TensorDict(out, batch_size=[num], device=device)


class LastLegalBot:
    """A bot class for seat-map tests: always plays the highest legal action."""

    def __call__(self, obs, action_mask, seat, generator):
        return (action_mask * torch.arange(action_mask.shape[-1], device=action_mask.device)).argmax(-1)


class RowCountingBot(LastLegalBot):
    """``LastLegalBot`` that records the number of rows of each call (class-level: the seat map builds its own)."""

    calls: list[int] = []

    def __call__(self, obs, action_mask, seat, generator):
        RowCountingBot.calls.append(int(obs.shape[0]))
        return super().__call__(obs, action_mask, seat, generator)
