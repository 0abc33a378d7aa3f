"""PPO's update of one rollout: its learning targets (values, next values, GAE) and the minibatch optimisation loop.

``PPOUpdate`` is a mixin of ``PPO`` (``algos/ppo.py``), which supplies the critic (read through ``PPOPolicy``'s
``_obs``/``_critic_features``), ``hparams``, ``generator``, ``reward_scaler`` and the loss of one minibatch
(``minibatch_loss``); ``RecurrentPPO`` reuses ``run_epochs`` with its own minibatches of whole sequences.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos.compiled_step import CompiledMinibatchStep, eligibility
from rl_lightning.algos.optimizer_steps import OptimizerSteps
from rl_lightning.algos.selfplay_targets import selfplay_targets
from rl_lightning.data.rows import gather_rows
from rl_lightning.errors import ConfigError
from rl_lightning.objectives.gae import generalized_advantage_estimate
from rl_lightning.processes import stop

# What one optimiser step reports, in this order (logged as ``train/<name>``, averaged over the update's steps).
TERM_NAMES = ("loss", "loss_policy", "loss_value", "loss_entropy", "approx_kl", "clip_fraction", "entropy", "grad_norm")
_UPDATE_KEYS = (keys.OBS, keys.ACTION, keys.LOGPROB, keys.VALUE, keys.ADVANTAGE, keys.RETURN)


class PPOUpdate:
    """``process_rollout`` (the targets of a fresh ``[T, B]`` rollout; self-play's per-seat ones through
    ``algos/selfplay_targets.py``) and ``update`` (``update_epochs × num_minibatches`` optimiser steps on it,
    ``target_kl`` early stop, stop requests honoured between steps, optional ``torch.compile`` of the loss).

    A subclass with another loss (``AlphaZero``) names the rollout columns its minibatches carry (``update_keys``)
    and the terms its loss reports (``term_names``, the gradient norm last)."""

    update_keys: tuple[str, ...] = _UPDATE_KEYS
    term_names: tuple[str, ...] = TERM_NAMES

    @torch.no_grad()
    def process_rollout(self, batch: TensorDict) -> TensorDict:
        """Add ``value`` = V(obs) (unless acting gave it), ``next_value`` = V(final_obs), GAE ``advantage`` and
        ``return`` to a ``[T, B]`` rollout."""
        if batch.numel() == 0:
            raise ConfigError("PPO received an empty rollout; data.num_steps and data.num_envs must be >= 1")
        if keys.VALUE not in batch:
            batch[keys.VALUE] = self.critic(self._critic_features(batch)).squeeze(-1)
        if self.env_spec.num_seats > 1:
            return selfplay_targets(self, batch)
        batch[keys.NEXT_VALUE] = self._next_value(batch)
        reward = batch[keys.REWARD]  # stays raw in the rollout
        if self.reward_scaler is not None:
            done = batch[keys.TERMINATED] | batch[keys.TRUNCATED]
            self.reward_scaler.update(reward, done, batch.get(keys.IS_FIRST, None))  # is_first: restarted envs
            reward = self.reward_scaler(reward)
        advantage, value_target = generalized_advantage_estimate(
            reward,
            batch[keys.VALUE],
            batch[keys.NEXT_VALUE],
            batch[keys.TERMINATED],
            batch[keys.TRUNCATED],
            self.hparams.gamma,
            self.hparams.gae_lambda,
        )
        batch[keys.ADVANTAGE] = advantage
        batch[keys.RETURN] = value_target
        return batch

    def _next_value(self, batch: TensorDict) -> torch.Tensor:
        """``V(final_obs)`` of every step of a ``[T, B]`` rollout, running the critic only where it must.

        Within an episode ``final_obs[t]`` is ``obs[t + 1]``, whose value the rollout already holds; only episode
        ends and the last tick have successors outside it. On pixels that saves a CNN forward over the whole
        rollout, for one host sync per rollout (the boolean gather).
        """
        value = batch[keys.VALUE]
        outside = batch[keys.TERMINATED] | batch[keys.TRUNCATED]
        outside[-1] = True
        next_value = torch.cat([value[1:], value[-1:]])
        final_obs = batch[keys.FINAL_OBS][outside]
        rows = TensorDict({keys.OBS: final_obs}, final_obs.shape[:1])
        next_value[outside] = self.critic(self._critic_features(rows)).squeeze(-1).to(next_value.dtype)
        return next_value

    def update(self, batch: TensorDict, optimizer: Any) -> TensorDict:
        """One PPO update on a processed rollout (flattened here): ``update_epochs × num_minibatches`` optimiser steps.

        Returns the minibatch-averaged loss terms and diagnostics (detached). Works attached to a Trainer or
        standalone (``FailFast.reproduce`` replays a failing update this way).

        The minibatch loop is kept lean (the profile in benchmarks/NOTES.md): the columns it needs are pulled out
        of the TensorDict once (observations normalised once; image frames laid out for the CNN once; a fixed decoding
        run once), shuffled with one whole-row gather per epoch (``data/rows.py``) and sliced as views per minibatch;
        the terms are stacked into one tensor per step and summed on the device (read once, when logged).
        """
        hp = self.hparams
        batch = batch.reshape(-1)
        minibatch = batch.numel() // hp.num_minibatches
        if minibatch < 2:  # self-play keeps only the learning seats' decisions: their number varies
            raise ConfigError(
                f"this rollout has {batch.numel()} decisions to learn from, fewer than 2 per minibatch for "
                f"model.num_minibatches={hp.num_minibatches}; raise data.num_steps or data.num_envs"
            )
        size = minibatch * hp.num_minibatches  # a remainder of rows is left out of each epoch (self-play only)
        columns = {key: batch[key] for key in self.update_keys if key != keys.OBS}
        obs = self._obs(batch)  # the statistics are frozen during an update: normalise once
        if self.decodes_once:  # a fixed decoding (Hearts' 5,088 -> 516): once per row, not once per minibatch
            with torch.no_grad():
                columns[keys.FEATURES] = self.encoder(obs)
        else:  # image leaves laid out for the CNN once here, not in each of the update's minibatches
            columns[keys.OBS] = self.encoder.stage(obs)
        if keys.ACTION_MASK in batch:
            columns[keys.ACTION_MASK] = batch[keys.ACTION_MASK]
        if getattr(self, "critic_reads_state", False):  # a centralised critic: every seat's view
            columns[keys.CRITIC_OBS] = batch[keys.CRITIC_OBS]

        def epoch() -> Iterator[dict[str, Any]]:
            perm = torch.randperm(batch.numel(), generator=self.generator)[:size].to(batch.device)
            shuffled = {key: gather_rows(value, perm) for key, value in columns.items()}
            for start in range(0, size, minibatch):
                yield {key: value[start : start + minibatch] for key, value in shuffled.items()}

        return self.run_epochs(optimizer, epoch)

    def run_epochs(self, optimizer: Any, epoch: Callable[[], Iterator[dict[str, Any]]]) -> TensorDict:
        """``update_epochs`` passes of ``epoch()``'s minibatches, one optimiser step each; a stop request abandons
        the update, and ``target_kl`` ends it after an epoch whose mean KL exceeds it. Returns the mean terms."""
        hp = self.hparams
        params = [p for p in self.parameters() if p.requires_grad]
        steps_runner = OptimizerSteps(self, optimizer)
        max_norm = hp.max_grad_norm if hp.max_grad_norm > 0 else float("inf")
        sums = torch.zeros(len(self.term_names), device=self.device)
        kl_index = self.term_names.index("approx_kl") if hp.target_kl is not None else 0
        steps = 0
        compiled = self._compiled_step(steps_runner, max_norm) if hp.compile_update else None
        for _ in range(hp.update_epochs):
            epoch_kl = torch.zeros((), device=self.device)
            for mb in epoch():
                stop.check()  # a stop request abandons the update; the checkpoint is the previous one's
                if compiled is not None:
                    terms = compiled.step(mb)
                    steps_runner.stepped()
                else:
                    terms = self._minibatch_step(mb, steps_runner, params, max_norm)
                sums += terms
                epoch_kl += terms[kl_index]
                steps += 1
            if hp.target_kl is not None:
                mean_kl = epoch_kl / hp.num_minibatches
                if self._trainer is not None:
                    mean_kl = self.trainer.strategy.reduce(mean_kl, reduce_op="mean")
                if mean_kl > hp.target_kl:  # one host sync per epoch, only with target_kl
                    break
        steps_runner.finish()
        return TensorDict(dict(zip(self.term_names, (sums / steps).unbind())), batch_size=[])

    def _minibatch_step(
        self, mb: dict[str, Any], optimizer: OptimizerSteps, params: list[torch.Tensor], max_norm: float
    ) -> torch.Tensor:
        """One optimiser step; returns the ``term_names`` values stacked (detached)."""
        loss, terms = self._minibatch_loss(mb)
        optimizer.zero_grad()
        optimizer.backward(loss)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
        optimizer.step()
        return torch.cat([terms, grad_norm.reshape(1)])

    def _compiled_step(self, steps: OptimizerSteps, max_norm: float) -> CompiledMinibatchStep | None:
        """With ``compile_update``: the whole minibatch step compiled (``algos/compiled_step.py``), made on first use
        and rebound to the optimiser's state before each update; ``None`` where it cannot apply (said once), and the
        loss alone is compiled instead."""
        cached = self.__dict__.get("_compiled_step_cache")
        key = (id(self), id(steps.optimizer))  # a deep copy, or a new optimiser, builds its own
        if cached is not None and cached[0] == key:
            if cached[1] is not None:
                cached[1].refresh()
            return cached[1]
        reason = eligibility(steps.optimizer, steps.direct)
        if reason is not None:
            rank_zero_warn(f"model.compile_update: {reason}, so the minibatch loss is compiled, not its whole step")
        compiled = None if reason else CompiledMinibatchStep(self, steps.optimizer, max_norm)
        self.__dict__["_compiled_step_cache"] = (key, compiled)
        return compiled

    @property
    def _minibatch_loss(self) -> Any:
        """``minibatch_loss`` itself, or (``compile_update``) its ``torch.compile``d form, made on first use."""
        if not self.hparams.compile_update:
            return self.minibatch_loss
        compiled = self.__dict__.get("_compiled_loss")
        if compiled is None or compiled[0] != id(self):  # a deep copy must not call its original's graph
            compiled = (id(self), torch.compile(self.minibatch_loss, dynamic=False))
            self.__dict__["_compiled_loss"] = compiled
        return compiled[1]
