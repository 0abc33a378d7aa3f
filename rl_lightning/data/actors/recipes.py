"""What an actor builds its collector from: the serial path's own collectors, rebuilt inside the actor process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rl_lightning.data.collector import Collector
from rl_lightning.data.selfplay import SelfPlay
from rl_lightning.envs.base import BatchedEnv


@dataclass
class SingleAgentRecipe:
    """A plain ``Collector`` (one seat): nothing happens between rollouts."""

    def build(self, env: BatchedEnv, seed: int, module: Any) -> Collector:
        return Collector(env, seed=seed)

    def before_rollout(self, module: Any) -> None:
        """Nothing to do between rollouts of a single-agent env."""


@dataclass
class SelfPlayRecipe:
    """A multi-seat game's ``SelfPlayCollector`` with the seat map and the league of the datamodule.

    The actor starts from the learner's league as it is when the actor starts (``league_state``), then takes its own
    snapshots on the same schedule (every ``snapshot_every_n_updates`` versions of the weights it receives) while
    the learner keeps the checkpointed copy: a restarted or resumed actor starts again from the learner's.

    Attributes:
        env: the game's env core; ``seats`` and ``league`` the datamodule's settings; ``league_state`` the
            learner's ``League.state_dict()`` (``None`` without a league).
    """

    env: Any
    seats: dict[Any, Any] | None
    league: dict[str, Any] | None
    league_state: dict[str, Any] | None

    def build(self, env: BatchedEnv, seed: int, module: Any) -> Any:
        self._selfplay = SelfPlay(self.env, self.seats, self.league)
        self._selfplay.load_state_dict(self.league_state, module)
        return self._selfplay.collector(env, seed, module)

    def before_rollout(self, module: Any) -> None:
        """A league snapshot of the weights just received, when one is due."""
        self._selfplay.before_rollout(module)
