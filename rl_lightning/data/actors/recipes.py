"""What an actor builds its collector from: the serial path's own collectors, rebuilt inside the actor process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.collector import Collector
from rl_lightning.data.selfplay import SelfPlay
from rl_lightning.data.sequence_collector import SequenceCollector
from rl_lightning.envs.base import BatchedEnv
from rl_lightning.envs.random_action import random_action


class _Recipe:
    """What every recipe does unless it says otherwise: act with the module's training ``acting_policy``."""

    _policy: Any = None

    def policy(self, module: Any, env: BatchedEnv) -> Any:
        """The policy the next rollout acts with (built once: it reads the module's weights, copied in place)."""
        if self._policy is None:
            self._policy = module.acting_policy(env, deterministic=False, training=True)
        return self._policy

    def before_rollout(self, module: Any) -> None:
        """Called when new weights arrived, before the rollout that uses them; nothing by default."""


@dataclass
class SingleAgentRecipe(_Recipe):
    """A plain ``Collector`` (one seat)."""

    def build(self, env: BatchedEnv, seed: int, module: Any) -> Collector:
        return Collector(env, seed=seed)


@dataclass
class SelfPlayRecipe(_Recipe):
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


@dataclass
class DreamerRecipe(_Recipe):
    """DreamerV3's ``SequenceCollector``: uniform random actions while the run is in its prefill
    (``learning_starts``), then the module's player, whose RSSM state carries over from one rollout to the next.

    The actor cannot see the run's env-step counter, so it counts it on: ``env_steps`` (the run's when the actor
    started) grows by ``steps_per_rollout`` (what the whole run collects while this actor collects one rollout) per
    rollout. With one actor on one rank that is the serial path's count exactly.
    """

    learning_starts: int
    env_steps: int
    steps_per_rollout: int

    def build(self, env: BatchedEnv, seed: int, module: Any) -> SequenceCollector:
        return SequenceCollector(env, seed=seed)

    def policy(self, module: Any, env: BatchedEnv) -> Any:
        prefill = self.env_steps < self.learning_starts
        self.env_steps += self.steps_per_rollout
        if prefill:
            spec = env.spec
            return lambda view, gen: TensorDict(
                {keys.ACTION: random_action(spec, view, gen)}, batch_size=view.batch_size, device=view.device
            )
        return super().policy(module, env)  # the player: built once, it keeps its recurrent state
