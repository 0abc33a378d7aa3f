"""For the replay-with-actors tests: a recipe that tags each row with what the actor acted with (the CartPole that
raises once is ``tests.actor_envs.RaisesOnceCartPole``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tensordict import TensorDict

from rl_lightning.data.actors.recipes import SingleAgentRecipe
from rl_lightning.envs.base import BatchedEnv

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
