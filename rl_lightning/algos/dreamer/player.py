"""``DreamerPlayer``: the acting side of DreamerV3, one recurrent state per env carried across ticks."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning import keys
from rl_lightning.algos.dreamer.policy import ActionSpace


class DreamerPlayer:
    """Filters each env's observations through the RSSM and acts with the actor on the posterior feature.

    Per env it carries the RSSM state (``deter``, ``stoch``) and the previous model-format action. Where the view
    says ``is_first`` the RSSM's ``obs_step`` replaces both by the initial state and a zero action, so episodes
    never leak into each other. Training samples latents and actions; evaluation (``deterministic``) takes modes.

    Args:
        networks: ``{"world_model", "actor"}``: the learner's own modules (CPU: aliased, free) or the actor copy
            that ``CUDAStreamWeightSync`` refreshes.
        space: action format and distributions.
        num_envs: envs this player acts for.
        device: where its state lives.
        deterministic: act with modes instead of samples.
    """

    def __init__(
        self, networks: nn.ModuleDict, space: ActionSpace, num_envs: int, device: torch.device, deterministic: bool
    ) -> None:
        self.networks = networks
        self.space = space
        self.num_envs = num_envs
        self.deterministic = deterministic
        rssm = networks["world_model"].rssm
        self.state: TensorDict = rssm.initial_state(num_envs, device)
        self.prev_action = torch.zeros(num_envs, space.dim, device=device)

    @torch.no_grad()
    def __call__(self, view: TensorDict, generator: torch.Generator) -> TensorDict:
        world_model, actor = self.networks["world_model"], self.networks["actor"]
        embed = world_model.embed(view[keys.OBS])
        post, _ = world_model.rssm.obs_step(
            self.state, self.prev_action, embed, view[keys.IS_FIRST], generator, sample=not self.deterministic
        )
        action = self.space.sample(actor(world_model.rssm.feature(post)), generator, self.deterministic)
        self.state = post
        self.prev_action = action
        return TensorDict({keys.ACTION: self.space.to_env(action)}, batch_size=view.batch_size, device=view.device)

    def state_dict(self) -> dict[str, Any]:
        return {"state": self.state.cpu().to_dict(), "prev_action": self.prev_action.cpu()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        device = self.prev_action.device
        self.state = TensorDict(state["state"], batch_size=[self.num_envs]).to(device)
        self.prev_action = state["prev_action"].to(device)
