"""Bundled bots for multi-seat games: callables that choose an action for a batch of acting seats.

The bot protocol (DESIGN.md §10, STYLE.md §13): ``bot(obs, action_mask, seat, generator) -> action``, where ``obs``
is the env's ``obs`` for the rows the bot plays (a tensor ``[B, *obs]``, or a TensorDict for ``Dict``
observations), ``action_mask`` bool ``[B, A]`` those seats' legal actions, ``seat`` int64 ``[B]`` which seat
acts in each row, and ``generator`` the ``torch.Generator`` every random choice draws from (seeded runs repeat).
It returns int64 ``[B]`` legal actions. A bot knows nothing of the engine or of the seat map: the engine wrapper
turns a game into observations, configuration says who plays which seat, and a bot only reads what a seat sees.
A user's bot is any class with this ``__call__`` (a config names it by class path, e.g. ``my_pkg.bots:MyBot``).
"""

from __future__ import annotations

import torch

from rl_lightning.envs.games.bots.connect_four import ConnectFourHeuristic
from rl_lightning.envs.games.bots.hearts import HeartsHeuristic


class RandomBot:
    """Uniform over each row's legal actions, drawn from ``generator``."""

    def __call__(
        self, obs: object, action_mask: torch.Tensor, seat: torch.Tensor, generator: torch.Generator
    ) -> torch.Tensor:
        noise = torch.rand(action_mask.shape, generator=generator, device=action_mask.device)
        return torch.where(action_mask, noise, -1.0).argmax(-1)


__all__ = ["ConnectFourHeuristic", "HeartsHeuristic", "RandomBot"]
