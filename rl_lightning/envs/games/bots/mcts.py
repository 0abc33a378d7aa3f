"""OpenSpiel's Monte-Carlo tree search bot (``open_spiel.python.algorithms.mcts.MCTSBot`` with random rollouts) as a
baseline opponent of the bot protocol, for perfect-information OpenSpiel games (Connect Four, Tic-Tac-Toe).

A search needs the game's state, not a seat's observation: this bot declares ``needs_engine_state = True``, and the
callers that can give it (the match driver, the self-play collector) pass ``engine_states=``, the live
``pyspiel.State`` of each of its rows (``OpenSpielEnv.engine_state``), which the search clones and never changes.
``check_env`` refuses, in one line, an env without engine states (PettingZoo) or with hidden information (a search
of the true state would read the other seats' cards).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rl_lightning.errors import ConfigError


class OpenSpielMCTSBot:
    """UCT search with random-rollout leaf values (OpenSpiel's ``MCTSBot`` and ``RandomRolloutEvaluator``).

    Each call draws one integer from ``generator`` and seeds a ``numpy`` ``RandomState`` with ``(seed, draw)``;
    every rollout and tie-break of the call's searches draw from it (rows in order), so a seeded match repeats.

    Args:
        simulations: simulations per decision (OpenSpiel's ``max_simulations``).
        rollouts: random rollouts averaged per leaf evaluation (``n_rollouts``).
        uct_c: the UCT exploration constant.
        seed: mixed into every call's random state: two bots with different seeds search differently.
        solve: back up proven wins and losses (MCTS-Solver; OpenSpiel's default).
    """

    #: Callers pass ``engine_states=[pyspiel.State, ...]`` (one per row) to a bot that declares this.
    needs_engine_state = True

    def __init__(
        self, simulations: int = 100, rollouts: int = 1, uct_c: float = 2.0, seed: int = 0, solve: bool = True
    ) -> None:
        for name, value, least in (("simulations", simulations, 2), ("rollouts", rollouts, 1)):
            if not isinstance(value, int) or value < least:  # one simulation leaves OpenSpiel's root without children
                raise ConfigError(f"OpenSpielMCTSBot: {name}={value!r} must be an int >= {least}")
        if not uct_c > 0:
            raise ConfigError(f"OpenSpielMCTSBot: uct_c={uct_c!r} must be > 0 (2 is OpenSpiel's example value)")
        self.simulations, self.rollouts, self.uct_c, self.seed, self.solve = simulations, rollouts, uct_c, seed, solve

    def check_env(self, env: Any, field: str = "OpenSpielMCTSBot") -> None:
        """Refuse, in one line, an env whose games this bot cannot search (before any game is played)."""
        name = getattr(getattr(env, "spec", None), "name", type(env).__name__)
        if not callable(getattr(env, "engine_state", None)):
            raise ConfigError(f"{field}: OpenSpielMCTSBot searches the engine's game state, which {name} "
                              f"({type(env).__name__}) does not expose; play it on an OpenSpiel game "
                              "(rl_lightning.envs.games.OpenSpielEnv, env_id: open_spiel:connect_four)")  # fmt: skip
        game = getattr(env, "game", None)
        if game is not None and game.get_type().reward_model.name != "TERMINAL":
            raise ConfigError(f"{field}: {name} pays rewards during the game; OpenSpiel's MCTSBot searches games "
                              "with terminal rewards only")  # fmt: skip
        if not env.spec.perfect_information:
            raise ConfigError(
                f"{field}: {name} hides information, and a search of the true state would read it; "
                "use OpenSpielMCTSBot on perfect-information games (connect_four, tic_tac_toe)"
            )

    def __call__(
        self,
        obs: Any,
        action_mask: torch.Tensor,
        seat: torch.Tensor,
        generator: torch.Generator,
        engine_states: list[Any] | None = None,
    ) -> torch.Tensor:
        if not engine_rows("OpenSpielMCTSBot", engine_states, action_mask):
            return torch.zeros(0, dtype=torch.int64, device=action_mask.device)
        from open_spiel.python.algorithms import mcts

        draw = int(torch.randint(2**31 - 1, (1,), generator=generator, device=generator.device))
        rng = np.random.RandomState([self.seed % 2**32, draw])
        evaluator = mcts.RandomRolloutEvaluator(n_rollouts=self.rollouts, random_state=rng)
        actions = []
        for state in engine_states:
            search = mcts.MCTSBot(state.get_game(), self.uct_c, self.simulations, evaluator, solve=self.solve,
                                  random_state=rng)  # fmt: skip
            actions.append(search.step(state))
        return torch.tensor(actions, dtype=torch.int64, device=action_mask.device)


def engine_rows(owner: str, engine_states: list[Any] | None, action_mask: torch.Tensor) -> bool:
    """Whether a searching bot has rows to play: refuses a call without one engine state per row (one line, naming
    how to play it), and is False for an empty batch."""
    if engine_states is None:
        raise ConfigError(f"{owner} needs the engine states of its rows (engine_states=); play it through the match "
                          "driver, GameEvaluation or a seat map of an OpenSpielEnv")  # fmt: skip
    if len(engine_states) != len(action_mask):
        raise ValueError(f"{owner}: {len(engine_states)} engine states for {len(action_mask)} rows")
    return bool(engine_states)
