"""For the replay-with-actors tests: a recipe that tags each row with what the actor acted with, and the SPO fit that
records, rollout by rollout, which normaliser statistics the actors acted with (the CartPole that raises once is
``tests.actor_envs.RaisesOnceCartPole``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
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


def spo_normaliser_fit(tmp_path: Any, backend: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Fit SPO with ``normalize_obs`` and one actor (``backend``: ``processes`` or ``ray``) over six rollouts while
    ``learning_starts`` holds the version at 0; returns the observation mean each rollout was acted with and the
    learner's means (``S_0``, then ``S_k`` after ``process_rollout`` of rollout ``k - 1``)."""
    import lightning.pytorch as pl

    from rl_lightning.algos import SPO
    from rl_lightning.data import ReplayDataModule
    from rl_lightning.envs import CartPole
    from tests.helpers import trainer

    pl.seed_everything(0)
    dm = ReplayDataModule(
        CartPole(), num_envs=4, rollout_length=8, total_env_steps=6 * 32, buffer_size=256, batch_size=4,
        sequence_length=4, gradient_steps=1, learning_starts=5 * 32 + 1, num_actors=1,
    )  # fmt: skip
    dm.actor_backend, dm.actor_recipe = backend, NormalizerTaggingRecipe  # read by ``start_pool`` at every start
    module = SPO(env_spec=dm.env_spec, hidden_sizes=(16,), num_particles=4, search_depth=2, resample_period=2,
                 normalize_obs=True)  # fmt: skip
    means = [module.obs_normalizer.rms.mean.clone()]
    acted: list[torch.Tensor] = []
    original = module.process_rollout

    def recording(batch: TensorDict) -> Any:
        acted.append(batch[ACTING_OBS_MEAN][0, 0].clone())
        out = original(batch)
        means.append(module.obs_normalizer.rms.mean.clone())
        return out

    module.process_rollout = recording
    trainer(tmp_path).fit(module, dm)
    assert module.policy_version == 1  # one gradient step, after the sixth rollout
    assert len(acted) == 6
    return acted, means
