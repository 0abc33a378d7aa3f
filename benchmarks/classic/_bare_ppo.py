"""A hand-written PPO update: the reference the Trainer's update is timed against (issue 13's "bare eager loop").

The same math as ``PPO.update`` on the same networks and rollout, written the way one would by hand (CleanRL
style): tensors indexed directly, observations normalised once per update, ``loss.backward()``, a global-norm clip
and a fused Adam step, the logged diagnostics (approx. KL, clip fraction, gradient norm) summed on the device. No
Lightning, no TensorDict, no hooks. Discrete (categorical) and ``Box`` (diagonal Gaussian) policies.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys

_LOG_2PI = math.log(2.0 * math.pi)


def hand_written_update(module: Any, batch: TensorDict, optimizer: torch.optim.Optimizer) -> torch.Tensor:
    """``update_epochs × num_minibatches`` optimiser steps on ``module``'s actor/critic; returns the summed terms."""
    hp = module.hparams
    obs = batch[keys.OBS]
    if module.obs_normalizer is not None:
        obs = module.obs_normalizer(obs)
    obs = module.encoder(obs).detach()  # ``mlp`` encoders have no parameters: flatten/cast once
    action, old_logprob = batch[keys.ACTION], batch[keys.LOGPROB]
    advantages, returns = batch[keys.ADVANTAGE], batch[keys.RETURN]
    actor, critic = module.actor, module.critic
    log_std = getattr(module, "log_std", None)
    params = [p for p in module.parameters() if p.requires_grad]
    size = obs.shape[0]
    minibatch = size // hp.num_minibatches
    sums = torch.zeros(4)
    for _ in range(hp.update_epochs):
        perm = torch.randperm(size, generator=module.generator)
        for start in range(0, size, minibatch):
            idx = perm[start : start + minibatch]
            out = actor(obs[idx])
            if log_std is None:
                log_p = out.log_softmax(-1)
                logprob = log_p.gather(-1, action[idx].unsqueeze(-1)).squeeze(-1)
                entropy = -(log_p.exp() * log_p).sum(-1)
            else:
                std_log = log_std.expand_as(out)
                z = (action[idx] - out) * (-std_log).exp()
                logprob = (-0.5 * z.pow(2) - std_log - 0.5 * _LOG_2PI).sum(-1)
                entropy = (std_log + 0.5 * (1.0 + _LOG_2PI)).sum(-1)
            adv = advantages[idx]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            log_ratio = logprob - old_logprob[idx]
            ratio = log_ratio.exp()
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - hp.clip_coef, 1 + hp.clip_coef)).mean()
            v_loss = 0.5 * (critic(obs[idx]).squeeze(-1) - returns[idx]).pow(2).mean()
            loss = pg_loss - hp.ent_coef * entropy.mean() + hp.vf_coef * v_loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(params, hp.max_grad_norm, foreach=True)
            optimizer.step()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - log_ratio).mean()
                clip_fraction = ((ratio - 1).abs() > hp.clip_coef).float().mean()
                sums += torch.stack([loss.detach(), approx_kl, clip_fraction, grad_norm])
    return sums
