"""An exact minimax player for small perfect-information two-player zero-sum OpenSpiel games (tic-tac-toe): the
judge a self-play policy must never lose to.

Each state's game value (for the seat to move, under optimal play by both) is computed by a negamax over the game
tree, cached by the state's string (tic-tac-toe: 5,478 positions; the first call fills the cache in about a second).
The bot plays uniformly at random among the moves that keep that value, drawn from the match's generator, so its
games vary while it never gives up value. It reads the engine state (``needs_engine_state``), as
``OpenSpielMCTSBot`` does; ``check_env`` refuses, in one line naming MinimaxBot, the games it cannot solve.
"""

from __future__ import annotations

from typing import Any

import torch

from rl_lightning.errors import ConfigError

_FITS = (
    "MinimaxBot plays small deterministic perfect-information two-player zero-sum OpenSpiel games with terminal "
    "rewards (tic_tac_toe)"
)


class MinimaxBot:
    """Optimal play by exhaustive negamax; ties between optimal moves broken uniformly at random."""

    needs_engine_state = True

    def __init__(self) -> None:
        self._values: dict[str, float] = {}

    def check_env(self, env: Any, field: str = "MinimaxBot") -> None:
        """Refuse, in one line naming MinimaxBot and why, an env this bot cannot search: no engine states, hidden
        information, chance nodes, rewards during the game, or not two zero-sum seats."""
        name = getattr(getattr(env, "spec", None), "name", type(env).__name__)
        game = getattr(env, "game", None)
        if not callable(getattr(env, "engine_state", None)) or game is None:
            raise ConfigError(f"{field}: MinimaxBot searches the engine's game state, which {name} "
                              f"({type(env).__name__}) does not expose; {_FITS}")  # fmt: skip
        game_type = game.get_type()
        problems = {
            "hides information, and a minimax over the true state would read it": not env.spec.perfect_information,
            "has chance nodes, which a minimax does not average over": game_type.chance_mode.name != "DETERMINISTIC",
            "pays rewards during the game": game_type.reward_model.name != "TERMINAL",
            f"has {env.spec.num_seats} seats, not two zero-sum ones": env.spec.num_seats != 2
            or game_type.utility.name != "ZERO_SUM",
        }
        for problem, found in problems.items():
            if found:
                raise ConfigError(f"{field}: MinimaxBot cannot play {name}: it {problem}; {_FITS}")

    def value(self, state: Any) -> float:
        """The game value for the player to move in ``state`` (its return under optimal play by both)."""
        key = str(state)
        cached = self._values.get(key)
        if cached is not None:
            return cached
        if state.is_terminal():
            raise ValueError("MinimaxBot.value: a terminal state has no player to move")
        player = state.current_player()
        best = max(self._child_value(state.child(action), player) for action in state.legal_actions())
        self._values[key] = best
        return best

    def _child_value(self, child: Any, player: int) -> float:
        """``child``'s value for ``player`` (the seat that moved into it)."""
        if child.is_terminal():
            return float(child.returns()[player])
        value = self.value(child)
        return value if child.current_player() == player else -value

    def optimal_actions(self, state: Any) -> list[int]:
        """Every legal action of ``state`` that keeps its game value for the player to move."""
        player, target = state.current_player(), self.value(state)
        return [a for a in state.legal_actions() if self._child_value(state.child(a), player) >= target - 1e-9]

    def __call__(
        self, obs: Any, action_mask: torch.Tensor, seat: torch.Tensor, generator: torch.Generator,
        engine_states: list[Any] | None = None,
    ) -> torch.Tensor:  # fmt: skip
        if engine_states is None:
            raise ConfigError("MinimaxBot needs the engine states of its rows (engine_states=); play it through the "
                             "match driver or GameEvaluation on an OpenSpielEnv")  # fmt: skip
        picks = []
        for state in engine_states:
            best = self.optimal_actions(state)
            picks.append(best[int(torch.randint(len(best), (1,), generator=generator, device=generator.device))])
        return torch.tensor(picks, dtype=torch.int64, device=action_mask.device)
