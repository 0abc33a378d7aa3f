"""``TrialReport``: a tuning trial's fit writes each evaluation's return, at its env step, for the study to read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from rl_lightning.callbacks.cadence import Cadence
from rl_lightning.callbacks.evaluation import Evaluation
from rl_lightning.errors import ConfigError

METRIC = "eval/episode_return"


class TrialReport(Callback):
    """Appends one JSON line ``{"env_steps", "updates", "step", "value"}`` per evaluation of the run's ``Evaluation``.

    ``step`` is where the study compares trials (the pruner compares them only at equal steps): the evaluation's
    counter rounded down to the evaluation cadence (``every_n_env_steps``: env steps; ``every_n_updates``: updates),
    so trials whose rollout sizes differ (``data.num_envs``, ``data.num_steps``), and so evaluate at different env
    steps, still meet at the cadence's multiples.

    Fires after ``Evaluation`` in ``on_train_batch_end`` and ``on_train_epoch_end`` (``rl-lightning tune`` appends
    it last), on rank zero. The tuning process reads the file while the fit runs: the values are the trial's
    intermediate reports (pruning) and its objective. Each line is flushed at once.

    Args:
        path: the JSON-lines file to append to.
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._written = 0

    @override
    def setup(self, trainer: pl.Trainer, pl_module: Any, stage: str) -> None:
        if self._evaluation(trainer) is None:
            raise ConfigError(
                "TrialReport: the run has no rl_lightning.callbacks.Evaluation, so there is no eval/episode_return "
                "to tune on; add one to trainer.callbacks"
            )

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._write_new(trainer)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self._write_new(trainer)

    def _write_new(self, trainer: pl.Trainer) -> None:
        evaluation = self._evaluation(trainer)
        if evaluation is None or not trainer.is_global_zero or len(evaluation.history) <= self._written:
            return
        with self.path.open("a") as file:
            for record in evaluation.history[self._written :]:
                line = {"env_steps": record["env_steps"], "updates": record["updates"],
                        "step": report_step(record, evaluation.cadence), "value": record[METRIC]}  # fmt: skip
                file.write(json.dumps(line) + "\n")
            file.flush()
        self._written = len(evaluation.history)

    @staticmethod
    def _evaluation(trainer: pl.Trainer) -> Evaluation | None:
        found = [callback for callback in trainer.callbacks if isinstance(callback, Evaluation)]
        return found[0] if found else None


def report_step(record: dict[str, float], cadence: Cadence) -> int:
    """An evaluation's counter (env steps or updates, as ``cadence`` counts) rounded down to the cadence."""
    return int(record[cadence.counter]) // cadence.every * cadence.every


def read_reports(path: Path) -> list[dict[str, float]]:
    """The complete lines of a ``TrialReport`` file so far (a line still being written is left for later)."""
    if not path.is_file():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]
