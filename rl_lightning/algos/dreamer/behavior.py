"""DreamerV3's actor-critic, trained in imagination (dreamer.md §5).

Imagined trajectories start from the world model's posterior states and roll the RSSM prior forward under the
actor. Everything imagined is computed without gradient, so the policy and value losses never reach the world
model (I12); the actor learns by REINFORCE on percentile-normalised λ-return advantages with an entropy bonus, the
two-hot critic on the λ-returns plus a regulariser towards the slow (EMA) critic.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import NamedTuple

import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning import keys
from rl_lightning.algos.dreamer.policy import ActionSpace
from rl_lightning.algos.dreamer.world_model import WorldModel
from rl_lightning.networks.dreamer_nets import DreamerSize, Head
from rl_lightning.objectives import dreamer as L


class ActorCritic(nn.Module):
    """Actor, critic, slow critic and the return normaliser.

    Args:
        feat_dim: width of the world model's feature.
        space: action format and distributions.
        size: network sizes (actor and critic use ``mlp_layers`` layers of ``hidden`` units).
        norm: ``rms`` or ``layer``.
        value_bins: bins of the two-hot critic.
        twohot_space: ``raw`` (2024) or ``symlog`` (2023).
        policy_outscale: output-layer scale of the actor (0.01 in 2024, 1.0 in 2023).
        retnorm_decay: EMA decay of the return percentiles.
        retnorm_limit: smallest return scale (returns are never scaled up).
    """

    def __init__(
        self,
        feat_dim: int,
        space: ActionSpace,
        size: DreamerSize,
        norm: str = "rms",
        value_bins: int = 255,
        twohot_space: str = "raw",
        policy_outscale: float = 0.01,
        retnorm_decay: float = 0.99,
        retnorm_limit: float = 1.0,
    ) -> None:
        super().__init__()
        self.space = space
        self.actor = Head(feat_dim, space.head_dim, size.hidden, size.mlp_layers, outscale=policy_outscale, norm=norm)
        self.critic = Head(feat_dim, value_bins, size.hidden, size.mlp_layers, outscale=0.0, norm=norm)
        self.slow_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.value_codec = L.TwoHot(value_bins, space=twohot_space)
        self.return_norm = L.ReturnNormalizer(decay=retnorm_decay, limit=retnorm_limit)


@torch.no_grad()
def imagine(
    world_model: WorldModel,
    actor: nn.Module,
    space: ActionSpace,
    start: TensorDict,
    horizon: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Roll the prior ``horizon`` steps from ``start`` ``[N]`` under the actor, sampling from ``generator``.

    The gradient step runs the same rollout as ``imagine_step`` regions over pre-drawn noise
    (``update_graphs.py``); this generator-driven form is its reference (same numbers on CPU, tested).

    Returns:
        ``features [H+1, N, F]`` of the start and imagined states, and ``actions [H+1, N, A]`` sampled at each
        (the last one is never scored).
    """
    state = start
    features, actions = [], []
    for step in range(horizon + 1):
        feat = world_model.rssm.feature(state)
        action = space.sample(actor(feat), generator)
        features.append(feat)
        actions.append(action)
        if step < horizon:
            state = world_model.rssm.img_step(state, action, generator)
    return torch.stack(features), torch.stack(actions)


def imagine_step(
    world_model: WorldModel,
    actor: nn.Module,
    space: ActionSpace,
    deter: torch.Tensor,
    stoch: torch.Tensor,
    action_noise: torch.Tensor,
    prior_noise: torch.Tensor | None,
) -> tuple[torch.Tensor, ...]:
    """One imagination step over tensors with its draws given (``GradientStepDraws``): the state's feature, the
    actor's action there and, unless ``prior_noise`` is ``None`` (the last state), the next ``deter, stoch``."""
    feat = torch.cat([deter, stoch.flatten(-2)], -1)
    action = space.sample_from_noise(actor(feat), action_noise)
    if prior_noise is None:
        return feat, action
    deter, stoch, _ = world_model.rssm.img_core(deter, stoch, action, prior_noise)
    return feat, action, deter, stoch


def behaviour_losses(
    ac: ActorCritic,
    world_model: WorldModel,
    features: torch.Tensor,
    actions: torch.Tensor,
    lam: float,
    disc: float,
    entropy_coef: float,
    slowreg: float,
    gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor]:
    """Per-step ``policy`` and ``value`` losses ``[H, N]`` on an imagined batch (2024 recipe).

    ``disc`` multiplies the predicted continue probability in the λ-returns and in the loss weights
    ``cumprod(disc·cont)/disc`` (1.0 when the continue target already carries the 1 − 1/333 discount).
    Returns the loss terms, detached diagnostics and the λ-returns ``[H, N]`` (the replay value loss
    bootstraps from their first row). It is ``behaviour_targets``, the return normaliser's update (percentiles,
    all-gathered over ``gather``), then ``behaviour_terms``.
    """
    targets = behaviour_targets(ac, world_model, features, lam, disc)
    ac.return_norm.update(targets.returns, gather)
    terms, diagnostics = behaviour_terms(ac, features, actions, targets, ac.return_norm.scale(), entropy_coef, slowreg)
    return terms, diagnostics, targets.returns


class BehaviourTargets(NamedTuple):
    """What the actor-critic losses need before the return scale, over ``[H+1, N]`` imagined states; only
    ``critic_logits`` carries a gradient."""

    reward: torch.Tensor
    cont: torch.Tensor
    slow_logits: torch.Tensor
    critic_logits: torch.Tensor
    value: torch.Tensor
    returns: torch.Tensor
    weight: torch.Tensor


def behaviour_targets(
    ac: ActorCritic, world_model: WorldModel, features: torch.Tensor, lam: float, disc: float
) -> BehaviourTargets:
    """Rewards, continues, critic outputs, λ-returns and loss weights of the imagined ``features [H+1, N, F]``."""
    horizon = features.shape[0] - 1
    with torch.no_grad():
        reward = world_model.reward(features)
        cont = world_model.cont(features)
        slow_logits = ac.slow_critic(features[:horizon])
    critic_logits = ac.critic(features)
    value = ac.value_codec.decode(critic_logits).detach()
    returns = L.lambda_return(reward, value, cont * disc, lam)
    weight = L.imagination_weights(cont[:horizon], disc)
    return BehaviourTargets(reward, cont, slow_logits, critic_logits, value, returns, weight)


def behaviour_terms(
    ac: ActorCritic,
    features: torch.Tensor,
    actions: torch.Tensor,
    targets: BehaviourTargets,
    return_scale: torch.Tensor,
    entropy_coef: float,
    slowreg: float,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The ``policy`` and ``value`` terms ``[H, N]`` and diagnostics from ``behaviour_targets`` and the scale."""
    reward, cont, slow_logits, critic_logits, value, returns, weight = targets
    horizon = features.shape[0] - 1
    advantage = (returns - value[:horizon]) / return_scale
    policy = ac.space.evaluate(ac.actor(features[:horizon]), actions[:horizon])
    terms = {
        "policy": L.reinforce_loss(policy.log_prob, policy.entropy, advantage, weight, entropy_coef),
        "value": L.value_loss(critic_logits[:horizon], returns, slow_logits, weight, ac.value_codec, slowreg),
    }
    diagnostics = {
        "entropy": policy.entropy.detach().mean(),
        "imag_return": returns.mean(),
        "imag_value": value.mean(),
        "imag_reward": reward[1:].mean(),
        "imag_cont": cont[1:].mean(),
        "return_scale": return_scale.detach(),
        "advantage_std": advantage.detach().std(),
    }
    return terms, diagnostics


def replay_value_loss(
    ac: ActorCritic,
    features: torch.Tensor,
    seq: TensorDict,
    imagined_returns: torch.Tensor,
    lam: float,
    cont_target: torch.Tensor,
    slowreg: float,
) -> torch.Tensor:
    """The 2024 replay value loss ``[T−1, B]``: λ-returns along the real sequence, bootstrapped by imagination.

    ``features`` are the (detached) posterior features ``[T, B, F]``, ``imagined_returns`` the imagined λ-returns
    ``[H, T·B]`` whose first row is the bootstrap at each real state, ``cont_target`` the continue target of each
    row (``1 − terminated``, discounted). Rows that end an episode get weight 0.
    """
    last = (seq[keys.TERMINATED] | seq[keys.TRUNCATED]).float()
    return replay_value_terms(ac, features, seq[keys.REWARD], last, imagined_returns, lam, cont_target, slowreg)


def replay_value_terms(
    ac: ActorCritic,
    features: torch.Tensor,
    reward: torch.Tensor,
    last: torch.Tensor,
    imagined_returns: torch.Tensor,
    lam: float,
    cont_target: torch.Tensor,
    slowreg: float,
) -> torch.Tensor:
    """``replay_value_loss`` on tensors: ``reward [T, B]`` and ``last [T, B]`` (1.0 where an episode ends)."""
    length, batch = reward.shape
    boot = imagined_returns[0].detach().reshape(length, batch)
    returns = L.lambda_return(reward.float(), boot, cont_target, lam, last)
    logits = ac.critic(features[:-1])
    with torch.no_grad():
        slow_logits = ac.slow_critic(features[:-1])
    return L.value_loss(logits, returns, slow_logits, 1.0 - last[:-1], ac.value_codec, slowreg)
