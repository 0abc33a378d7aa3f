"""What each algorithm shows in TensorBoard's Histograms tab (``model.histograms_every_n_updates``).

The modules keep a reference to the last update's data in ``histogram_source`` only while the ``Histograms``
callback runs (``keep_histogram_source``); these functions turn it into ``{tag: tensor}`` when the callback's
cadence is due, so the forwards they run (the policy's logits or means) cost nothing on the other updates.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys

FIELD = "histograms_every_n_updates"


def histograms_check(every: int | None) -> tuple[str, bool, str]:
    """The ``check_fields`` entry of ``histograms_every_n_updates``: ``None`` (off) or a positive update count."""
    ok = every is None or (isinstance(every, int) and every >= 1)
    return FIELD, ok, "use null (off, the default) or a number of updates >= 1 between histograms, e.g. 10"


def legal_logits(head: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The logits of legal actions only (masked ones are meaningless and would swamp the histogram)."""
    return head if mask is None or mask.shape != head.shape else head[mask]


def policy_histograms(module: Any, batch: TensorDict, features: torch.Tensor) -> dict[str, torch.Tensor]:
    """PPO and RecurrentPPO: the trained rows' GAE ``advantage`` (before per-minibatch normalisation), ``return``
    (the value target) and rollout ``value``, and the updated policy's output on those rows' actor ``features``:
    ``policy/logits`` (Discrete, MultiDiscrete, MultiBinary) or ``policy/mean`` and ``policy/log_std`` (Box)."""
    out = {
        "rollout/advantage": batch[keys.ADVANTAGE],
        "rollout/return": batch[keys.RETURN],
        "rollout/value": batch[keys.VALUE],
    }
    head = module.actor(features)
    if module.env_spec.action_kind == "box":
        out["policy/mean"] = head
        out["policy/log_std"] = module.log_std
    else:
        out["policy/logits"] = legal_logits(head, batch.get(keys.ACTION_MASK, None))
    return out


def recurrent_actor_features(module: Any, batch: TensorDict) -> torch.Tensor:
    """RecurrentPPO: the actor core's outputs ``[T·B, size]`` over a ``[T, B]`` rollout, replayed from each env's
    state at the rollout's first row with the resets at ``is_first`` (as its update does)."""
    steps, envs = batch.batch_size
    obs = module._obs(batch.reshape(-1))
    features = module.encoder(obs)
    critic = features if module.critic_encoder is None else module.critic_encoder(obs)
    out, _ = module.cores.unroll(
        features.reshape(steps, envs, -1),
        critic.reshape(steps, envs, -1),
        batch[keys.RECURRENT_STATE][0],
        batch[keys.IS_FIRST],
    )
    return out.flatten(0, 1)


def dreamer_histograms(source: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
    """DreamerV3: the last gradient step's imagined λ-returns ``[H, N]``, the critic's values of the same states
    and the actor's advantages ``(return − value) / S`` (S: the return normaliser's scale that step)."""
    returns, value, scale = source
    value = value[: returns.shape[0]]
    return {
        "imagination/return": returns,
        "imagination/value": value,
        "imagination/advantage": (returns - value) / scale,
    }
