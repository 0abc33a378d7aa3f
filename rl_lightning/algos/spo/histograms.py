"""What SPO shows in TensorBoard's Histograms tab (``model.histograms_every_n_updates``; ``algos/histograms.py``)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos.histograms import legal_logits
from rl_lightning.algos.spo.prior import gaussian_head


def spo_histograms(module: Any, rollout: TensorDict) -> dict[str, torch.Tensor]:
    """SPO: the last rollout's search results (each root particle's normalised weight, i.e. the target q̂, its
    advantage, the root value) and the updated prior's ``policy/logits`` or pre-tanh ``policy/mean`` and
    ``policy/log_std`` on its observations."""
    out = {
        "search/weights": rollout[keys.SAMPLED_WEIGHTS],
        "search/advantages": rollout[keys.SAMPLED_ADVANTAGES],
        "search/root_value": rollout[keys.SEARCH_VALUE],
    }
    flat = rollout.reshape(-1)
    head = module.actor(module.prior.features(flat[keys.OBS])).float()
    if module.env_spec.discrete:
        out["policy/logits"] = legal_logits(head, flat.get(keys.ACTION_MASK, None))
    else:
        mean, std = gaussian_head(head)
        out["policy/mean"], out["policy/log_std"] = mean, std.log()
    return out
