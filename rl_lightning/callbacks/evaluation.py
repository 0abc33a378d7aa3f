"""``Evaluation``: periodic deterministic evaluation episodes on a separate env, keyed on updates or env steps."""

from __future__ import annotations

import copy
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from rl_lightning.callbacks.cadence import cadence_due, check_cadence
from rl_lightning.envs.base import TorchEnv
from rl_lightning.errors import ConfigError
from rl_lightning.evaluation import run_episodes


class Evaluation(Callback):
    """Runs ``num_episodes`` evaluation episodes every ``every_n_updates`` updates or ``every_n_env_steps`` env steps.

    Fires in ``on_train_batch_end`` (after the update, before checkpointing) and at the end of training. Logs
    ``eval/episode_return``, ``eval/episode_length``, ``eval/random_episode_return`` (a uniform-random policy
    on the same env, measured once) and ``eval/margin_over_random``; the values are averaged over ranks, so
    ``RLCheckpoint(monitor="eval/episode_return")`` and ``rl_lightning.callbacks.EarlyStopping`` can use them.

    Args:
        every_n_updates: evaluate after every this many learner updates.
        every_n_env_steps: evaluate each time the env-step counter crosses a multiple of this.
        num_episodes: episodes per evaluation (one per env row, run in parallel).
        deterministic: act with the policy's mode (``False``: sample, as in training); ``None`` takes the
            algorithm's evaluation default (PPO: the mode; SPO: a draw from the search target, as published).
        env: the env core to evaluate on; ``None`` copies the datamodule's.
        seed: seed of the evaluation env; every evaluation replays the same start states.
        max_steps: safety bound on steps per evaluation.
    """

    def __init__(
        self,
        every_n_updates: int | None = None,
        every_n_env_steps: int | None = None,
        num_episodes: int = 10,
        deterministic: bool | None = None,
        env: TorchEnv | None = None,
        seed: int = 12_345,
        max_steps: int = 10_000,
    ) -> None:
        check_cadence("Evaluation", every_n_updates, every_n_env_steps)
        if num_episodes < 1:
            raise ConfigError(f"Evaluation: num_episodes={num_episodes} must be >= 1")
        self.every_n_updates = every_n_updates
        self.every_n_env_steps = every_n_env_steps
        self.num_episodes = num_episodes
        self.deterministic = deterministic
        self.env = env
        self.seed = seed
        self.max_steps = max_steps
        self.random_return: float | None = None
        self.last_env_steps = 0
        self.last_updates = -1
        self.eval_seconds = 0.0  # wall time spent evaluating (benchmarks subtract it from training time)
        self.history: list[dict[str, float]] = []

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(
            every_n_updates=self.every_n_updates,
            every_n_env_steps=self.every_n_env_steps,
            num_episodes=self.num_episodes,
            deterministic=self.deterministic,
        )

    def should_evaluate(self, pl_module: Any) -> bool:
        """Cadence predicate: overridable, evaluated identically on every rank (counters are global)."""
        return cadence_due(pl_module, self.every_n_updates, self.every_n_env_steps, self.last_env_steps)

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.sanity_checking or not self.should_evaluate(pl_module):
            return
        self.evaluate(trainer, pl_module)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        if pl_module.updates > 0 and self.last_updates != pl_module.updates:
            self.evaluate(trainer, pl_module, on_step=False)

    def evaluate(self, trainer: pl.Trainer, pl_module: Any, on_step: bool = True) -> dict[str, float]:
        """Play the episodes, log ``eval/*`` (per step, or per epoch from epoch-end hooks), return the record."""
        start = time.perf_counter()
        env = self.env if self.env is not None else copy.deepcopy(trainer.datamodule.env)
        seed = self.seed + 1_000 * trainer.global_rank
        if self.random_return is None:
            random_returns, _ = run_episodes(
                "random", env, self.num_episodes, pl_module.device, seed, True, self.max_steps
            )
            self.random_return = float(trainer.strategy.reduce(random_returns.mean(), reduce_op="mean"))
        was_training = pl_module.training
        pl_module.eval()
        deterministic = pl_module.eval_deterministic if self.deterministic is None else self.deterministic
        returns, lengths = run_episodes(
            pl_module, env, self.num_episodes, pl_module.device, seed, deterministic, self.max_steps
        )
        pl_module.train(was_training)
        if self.env is None:
            env.close()
        mean_return = trainer.strategy.reduce(returns.mean(), reduce_op="mean")
        metrics = {
            "eval/episode_return": mean_return,
            "eval/episode_length": trainer.strategy.reduce(lengths.mean(), reduce_op="mean"),
            "eval/random_episode_return": torch.tensor(self.random_return, device=pl_module.device),  # reducible
            "eval/margin_over_random": mean_return - self.random_return,
        }
        if not trainer.sanity_checking and trainer.state.fn == "fit" and trainer.training:
            # Already means over ranks (reduced above), so identical on every rank: sync_dist says so to Lightning
            # (its epoch-level check warns otherwise) and averaging equal values changes nothing.
            pl_module.log_dict(metrics, on_step=on_step, on_epoch=not on_step, batch_size=1, sync_dist=True)
        self.last_env_steps = pl_module.env_steps
        self.last_updates = pl_module.updates
        self.eval_seconds += time.perf_counter() - start
        record = {k: float(v) for k, v in metrics.items()}
        record.update(env_steps=pl_module.env_steps, updates=pl_module.updates)
        self.history.append(record)
        return record

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "random_return": self.random_return,
            "last_env_steps": self.last_env_steps,
            "last_updates": self.last_updates,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.random_return = state_dict["random_return"]
        self.last_env_steps = state_dict["last_env_steps"]
        self.last_updates = state_dict["last_updates"]
