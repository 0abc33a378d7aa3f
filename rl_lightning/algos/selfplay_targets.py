"""PPO's targets for a self-play rollout: per-seat credit, next values and GAE along each seat's own decisions."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.objectives.seat_credit import seat_credit, seat_gae

TRAIN_KEY = "train"  # self-play rollouts: the rows that learn (learning seats' decisions whose credit is complete)


def selfplay_targets(module: Any, batch: TensorDict) -> TensorDict:
    """Per-seat targets of a ``[T, B]`` self-play rollout (``objectives/seat_credit.py``): each decision's credited
    reward, its seat's next value, GAE along the seat's own decisions; ``train`` marks the rows that learn (learning
    seats, credit complete). ``module`` is the PPO whose critic and ``gamma``/``gae_lambda`` are used."""
    credit = seat_credit(
        batch[keys.SEAT],
        batch[keys.REWARD],
        batch[keys.TERMINATED],
        batch[keys.TRUNCATED],
        batch[keys.VALUE],
        final_seat_values(module, batch),
        batch.get(keys.SEAT_TRUNCATED, None),  # an eliminated seat of a truncated game bootstraps from 0
    )
    advantage, value_target = seat_gae(credit, batch[keys.VALUE], module.hparams.gamma, module.hparams.gae_lambda)
    batch[keys.NEXT_VALUE] = credit.next_value
    batch[keys.ADVANTAGE] = advantage
    batch[keys.RETURN] = value_target
    batch[TRAIN_KEY] = batch["learner"] & ~credit.open
    return batch


def final_seat_values(module: Any, batch: TensorDict) -> torch.Tensor | None:
    """``[T, B, S]``: each seat's value of its own view of the last state of a game that ended with a seat cut (0 on
    other ticks); ``None`` when the env never truncates (it then emits no ``final_obs``).

    A game the env truncated, and also a game that terminated after a seat had left it by its own truncation
    (PettingZoo: ``seat_truncated`` marks that seat on the game's last tick): that seat bootstraps from its final view.
    """
    if keys.FINAL_OBS not in batch:
        return None
    cut = batch[keys.TRUNCATED]
    if keys.SEAT_TRUNCATED in batch:
        cut = cut | (batch[keys.TERMINATED] & batch[keys.SEAT_TRUNCATED].any(-1))
    final_obs = batch[keys.FINAL_OBS][cut]  # [N, S, *obs]: one host sync per rollout
    seats = module.env_spec.num_seats
    rows = TensorDict({keys.OBS: final_obs.reshape(-1, *final_obs.shape[2:])}, [final_obs.shape[0] * seats])
    values = torch.zeros(*cut.shape, seats, dtype=batch[keys.VALUE].dtype, device=cut.device)
    if final_obs.shape[0] == 0:  # no game ended with a seat cut in this rollout
        return values
    values[cut] = module.critic(module._critic_features(rows)).reshape(-1, seats).to(values.dtype)
    return values
