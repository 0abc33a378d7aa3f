"""``EvalRequests``: what ``rl-lightning validate``/``test`` play. The evaluation is picked here, not by the module."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from rl_lightning.callbacks.evaluation import evaluation_for
from rl_lightning.callbacks.game_evaluation import game_evaluation_for
from rl_lightning.data.dataloaders import EvalRequest


class EvalRequests(Callback):
    """Plays each ``validate``/``test`` request and logs ``eval/*`` (``validate``) or ``test/*`` (``test``).

    Fires in ``on_validation_batch_end``/``on_test_batch_end`` on every ``EvalRequest`` the datamodule yields
    (``data.eval_episodes``/``data.eval_seed``; other batches, such as BC's supervised ones, are left to the
    module). A single-seat env plays the run's ``Evaluation`` settings and env form (``evaluation_for``: the
    configured callback, else its defaults), the request overriding ``num_episodes``/``seed`` where set, and logs
    the means over all ranks' episodes. A multi-seat game plays the run's ``GameEvaluation`` panel
    (``game_evaluation_for``: its settings, or ``random`` and the game's heuristic).

    ``rl-lightning validate``/``test`` attach it. A ``Trainer`` built in Python lists it in its callbacks:
    ``RLModule.validation_step`` refuses a request no ``EvalRequests`` plays (``eval_requests_attached``).
    """

    @override
    def setup(self, trainer: pl.Trainer, pl_module: Any, stage: str) -> None:
        pl_module.eval_requests_attached = True

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: Any, stage: str) -> None:
        pl_module.eval_requests_attached = False

    @override
    def on_validation_batch_end(
        self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if isinstance(batch, EvalRequest):
            play_request(trainer, pl_module, batch, "eval")

    @override
    def on_test_batch_end(
        self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if isinstance(batch, EvalRequest):
            play_request(trainer, pl_module, batch, "test")


def play_request(trainer: pl.Trainer, pl_module: Any, request: EvalRequest, prefix: str) -> None:
    """Play ``request`` with the run's evaluation (see ``EvalRequests``) and log its metrics under ``prefix``."""
    if pl_module.env_spec.num_seats > 1:
        with game_evaluation_for(trainer) as games:
            scalars = games.measure(trainer, pl_module, prefix)
        pl_module.log_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in scalars.items()}, batch_size=1)
        return
    with evaluation_for(trainer) as evaluation:
        metrics = evaluation.measure(trainer, pl_module, prefix, request.num_episodes, request.seed)
    # Over all ranks' episodes already, so equal on every rank: sync_dist averages equal values.
    pl_module.log_dict(metrics, sync_dist=True, batch_size=1)
