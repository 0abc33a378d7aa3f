"""For the replay-with-actors tests: a recipe that tags each row with what the actor acted with, and a CartPole
whose first actor to reach a chosen step raises once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensordict import TensorDict

from rl_lightning.data.actors.recipes import SingleAgentRecipe
from rl_lightning.envs.base import BatchedEnv
from tests.fault_envs import StepHookCartPole

#: The key of each row's copy of the actor module's observation-normaliser mean.
ACTING_OBS_MEAN = "acting_obs_mean"


@dataclass
class NormalizerTaggingRecipe(SingleAgentRecipe):
    """A plain ``Collector`` whose every row also carries the actor module's observation-normaliser mean as it was
    when the row was acted (``ACTING_OBS_MEAN``, float64 ``[*obs]``): what the actor's search normalised with."""

    def policy(self, module: Any, env: BatchedEnv) -> Any:
        acting = super().policy(module, env)
        mean = module.obs_normalizer.rms.mean

        def tagged(obs: TensorDict, generator: Any) -> TensorDict:
            out = acting(obs, generator)
            out[ACTING_OBS_MEAN] = mean.expand(*obs.batch_size, *mean.shape).clone()
            return out

        return tagged


class RaiseOnceCartPole(StepHookCartPole):
    """The torch CartPole whose ``fail_at``-th ``step_state`` call (search steps included) raises, in the first process
    to get there only (it leaves ``marker`` behind): the actor that replaces it runs normally."""

    def __init__(self, marker: str, fail_at: int = 60) -> None:
        super().__init__()
        self.marker = marker
        self.fail_at = fail_at

    def before_step(self, calls: int) -> None:
        if calls == self.fail_at and not Path(self.marker).exists():
            Path(self.marker).write_text("raised")
            raise RuntimeError(f"physics blew up at call {calls}")
