"""Bundled bots for multi-seat games: callables that choose an action for a batch of acting seats.

The bot protocol (docs/guides/games.md): ``bot(obs, action_mask, seat, generator) -> action``, where ``obs``
is the env's ``obs`` for the rows the bot plays (a tensor ``[B, *obs]``, or a TensorDict for ``Dict``
observations), ``action_mask`` bool ``[B, A]`` those seats' legal actions, ``seat`` int64 ``[B]`` which seat
acts in each row, and ``generator`` the ``torch.Generator`` every random choice draws from (seeded runs repeat).
It returns int64 ``[B]`` legal actions. A bot knows nothing of the engine or of the seat map: the engine wrapper
turns a game into observations, configuration says who plays which seat, and a bot only reads what a seat sees.
A user's bot is any class with this ``__call__`` (a config names it by class path, e.g. ``my_pkg.bots:MyBot``).
A search bot (``OpenSpielMCTSBot``) is the one exception: it declares ``needs_engine_state = True`` and is also given
``engine_states=``, its rows' live ``pyspiel.State`` objects (read only), by the match driver and the collector.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import torch

from rl_lightning.envs.base import TorchEnv
from rl_lightning.envs.games.bots.connect_four import ConnectFourHeuristic
from rl_lightning.envs.games.bots.hearts import HeartsHeuristic
from rl_lightning.envs.games.bots.mcts import OpenSpielMCTSBot
from rl_lightning.errors import ConfigError, nearest


class RandomBot:
    """Uniform over each row's legal actions, drawn from ``generator``."""

    def __call__(
        self, obs: object, action_mask: torch.Tensor, seat: torch.Tensor, generator: torch.Generator
    ) -> torch.Tensor:
        noise = torch.rand(action_mask.shape, generator=generator, device=action_mask.device)
        return torch.where(action_mask, noise, -1.0).argmax(-1)


def load_bot(path: str, field: str = "bot") -> object:
    """An instance of the bot class at ``path`` (``package.module.Class`` or ``package.module:Class``).

    Raises:
        ConfigError: one line naming ``field`` and the path when it does not import, is not a class, or its
            instances are not callable.
    """
    module, sep, name = path.partition(":") if ":" in path else path.rpartition(".")
    where = f"{field}={path!r}"
    if not sep or not module or not name:
        raise ConfigError(f"{where} is not a class path; write 'package.module.Class' (e.g. "
                          "rl_lightning.envs.games.bots.HeartsHeuristic)")  # fmt: skip
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception as err:  # ImportError, AttributeError, or whatever the user's module raises
        detail = " ".join(f"{type(err).__name__}: {err}".split())
        close = nearest_class_path(path)
        fix = f"did you mean {close}?" if close else "install the package or fix the path"
        raise ConfigError(f"{where} does not import ({detail}); {fix}") from None
    if not isinstance(cls, type):
        raise ConfigError(f"{where} is not a class; name a bot class whose instances are called as "
                          "bot(obs, action_mask, seat, generator)")  # fmt: skip
    try:
        bot = cls()
    except Exception as err:
        detail = " ".join(f"{type(err).__name__}: {err}".split())
        raise ConfigError(f"{where}: {name}() failed ({detail}); a bot class is built without arguments") from None
    if not callable(bot):
        raise ConfigError(f"{where}: {name} instances are not callable; define "
                          "__call__(self, obs, action_mask, seat, generator) -> action")  # fmt: skip
    return bot


def nearest_class_path(path: str) -> str | None:
    """The importable ``package.module.Name`` nearest to a ``path`` that does not import, fixing one misspelt part
    after another (a module of the package it names, a name of the module), or ``None`` when none is close."""
    parts = path.replace(":", ".").split(".")
    for _ in range(len(parts)):
        found, index = _import_prefix(parts)
        if index == len(parts):
            return ".".join(parts)
        if index == 0:
            return None
        last = index == len(parts) - 1  # a class or callable there, a module or package before
        names = [name for name in dir(found) if not name.startswith("_")]
        names = [name for name in names if isinstance(getattr(found, name), ModuleType) != last]
        if hasattr(found, "__path__") and not last:
            names += [info.name for info in pkgutil.iter_modules(found.__path__)]
        close = nearest(parts[index], names)
        if close is None or close == parts[index]:  # nothing close, or a module that exists but fails to import
            return None
        parts[index] = close
    return None


def _import_prefix(parts: list[str]) -> tuple[object, int]:
    """The object at the longest importable prefix of ``parts`` (modules, then attributes) and that prefix's length."""
    found: object = None
    for index, part in enumerate(parts):
        if found is not None and hasattr(found, part):
            found = getattr(found, part)
            continue
        try:
            found = importlib.import_module(".".join(parts[: index + 1]))
        except Exception:  # noqa: BLE001 - a module that does not import is a part to fix, whatever it raised
            return found, index
    return found, len(parts)


def needs_engine_state(player: Any) -> bool:
    """Whether ``player`` is called with ``engine_states=`` (it declares ``needs_engine_state = True``)."""
    return bool(getattr(player, "needs_engine_state", False))


def check_engine_players(env: TorchEnv, players: Sequence[Any], field: str) -> None:
    """Let each player that needs engine states refuse ``env`` in one line (its ``check_env``) before any play."""
    for player in players:
        if needs_engine_state(player):
            player.check_env(env, field)


__all__ = [
    "ConnectFourHeuristic", "HeartsHeuristic", "OpenSpielMCTSBot", "RandomBot", "check_engine_players", "load_bot",
    "nearest_class_path", "needs_engine_state",
]  # fmt: skip
