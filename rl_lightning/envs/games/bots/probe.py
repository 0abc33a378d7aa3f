"""Whether a bot fits a game: one call on a real first observation, before any game is played.

A bot reads a seat's observation, whose layout is the game's (``ConnectFourHeuristic`` reads Connect Four boards).
A bot named for the wrong game used to fail deep inside the first rollout or evaluation with a long traceback;
``check_bot_fits`` makes it fail at start-up, in one line naming the config field, the game and the fix.
"""

from __future__ import annotations

from typing import Any

import torch

from rl_lightning import keys
from rl_lightning.envs.games.base import one_line
from rl_lightning.errors import ConfigError

#: Games played by a probe: two rows, so a bot that ignores the batch dimension shows it.
_PROBE_GAMES = 2


def check_bot_fits(env: Any, bot: Any, field: str) -> None:
    """Call ``bot`` once on the first observations of ``env``'s games and refuse, in one line, a bot that raises,
    returns no int64 ``[B]`` actions, or plays an illegal one.

    Search bots (``needs_engine_state``) are checked by their own ``check_env``; ``env`` is the game core
    (``TorchEnv``) and its probe games are released before returning.
    """
    if getattr(bot, "needs_engine_state", False):
        return
    name = env.spec.name
    generator = torch.Generator().manual_seed(0)
    state = env.reset_state(_PROBE_GAMES, generator)
    try:
        obs = env.observe(state)
        mask = obs[keys.ACTION_MASK]
        try:
            action = bot(obs[keys.OBS], mask, obs[keys.SEAT], generator)
        except Exception as err:  # whatever a bot written for another game raises on this one's observations
            raise ConfigError(f"{field}: the bot does not fit {name} ({one_line(err)}); name a bot written for this "
                              "game's observations, or random") from None  # fmt: skip
        if not isinstance(action, torch.Tensor) or action.shape != mask.shape[:1] or action.is_floating_point():
            got = f"{action.dtype} {tuple(action.shape)}" if isinstance(action, torch.Tensor) else type(action).__name__
            raise ConfigError(f"{field}: the bot returned {got} on {name}; a bot returns int64 actions [B], one per "
                              "row it plays")  # fmt: skip
        legal = mask.gather(1, action.long().clamp(0, mask.shape[1] - 1).unsqueeze(1)).squeeze(1)
        if not bool(legal.all()) or bool((action < 0).any()) or bool((action >= mask.shape[1]).any()):
            raise ConfigError(f"{field}: the bot played illegal actions {action.tolist()} on {name}'s first "
                              "positions; a bot must choose among action_mask's legal actions")  # fmt: skip
    finally:
        env.release(state)
