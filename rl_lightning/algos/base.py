"""``RLModule``: what every algorithm's LightningModule shares (counters, lineage, acting interface)."""

from __future__ import annotations

import os
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import lightning.pytorch as pl
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos.histograms import FIELD as HISTOGRAMS_FIELD
from rl_lightning.algos.optimizer_steps import fresh_low_precision_weights
from rl_lightning.algos.policy_io import obs_batch
from rl_lightning.data.actors import PolicyFactory
from rl_lightning.envs.base import BatchedEnv, EnvSpec
from rl_lightning.errors import ConfigError
from rl_lightning.lineage import REVISION_KEY, PolicyRevision, check_family, constructor_args, weights_digest
from rl_lightning.processes import stop
from rl_lightning.processes.learner_threads import follow_actors
from rl_lightning.reporting.env_step_log import finite_only, log_at_env_step, publish_to_callbacks, to_floats
from rl_lightning.reporting.lightning_notices import silence_lightning_notices

COUNTERS_KEY = "rl_counters"

#: What collectors and evaluators step an env with: ``(obs, generator) -> TensorDict`` holding ``action``.
Policy = Callable[[TensorDict, torch.Generator], TensorDict]


class RLModule(pl.LightningModule):
    """Base LightningModule of rl_lightning algorithms.

    Holds the RL clock (docs/guides/metrics.md): ``updates`` (learner updates), ``policy_version`` (bumped on every
    weight change the actor sees) and, read from the datamodule, ``env_steps``. Checkpoints carry a
    ``PolicyRevision``; loading one written by another algorithm family fails with a clear message.
    Subclasses implement ``act`` (the acting policy the collector calls) and their update.
    """

    family: ClassVar[str] = ""
    #: Other families whose checkpoints this module can play (``validate``/``test``, never resume): PPO plays a BC
    #: clone (the same networks).
    plays_families: ClassVar[tuple[str, ...]] = ()
    #: Whether evaluation acts deterministically unless the ``Evaluation`` callback says otherwise.
    eval_deterministic: bool = True
    #: Set while the ``Histograms`` callback runs: the update keeps a reference to its data in ``histogram_source``
    #: (dropped by the callback in the same step) for ``histogram_tensors``.
    keep_histogram_source: bool = False
    histogram_source: Any = None
    #: Set while the ``EvalRequests`` callback is attached: it plays ``validate``/``test``'s requests.
    eval_requests_attached: bool = False
    #: Whether ``data.num_actors`` may collect with this module's ``policy_factory`` in actor processes: its
    #: ``acting_policy`` depends on nothing but its constructor arguments, its ``state_dict`` and the env.
    supports_actor_processes: ClassVar[bool] = False

    def __init__(self, env_spec: EnvSpec | None = None) -> None:
        super().__init__()
        silence_lightning_notices()  # before the Trainer sees this module: its checks warn about our design
        if env_spec is None:
            raise ConfigError(
                f"{type(self).__name__}: env_spec is missing; run through `rl-lightning` (it links data.env_spec) "
                "or pass env_spec=datamodule.env_spec"
            )
        self.env_spec = env_spec
        self.automatic_optimization = False
        self.updates = 0
        self.policy_version = 0
        self.parent_version = -1
        self.parent_digest = ""  # weights a fresh run started from (``init_weights``); '' for none
        self.generator = torch.Generator()
        self._seeded = False

    @abstractmethod
    def act(self, td: TensorDict, generator: torch.Generator | None = None, deterministic: bool = False) -> TensorDict:
        """The acting policy: ``obs`` (+ ``action_mask``) in; ``action`` (+ algorithm extras) out."""

    @property
    def acts_from_noise(self) -> bool:
        """Whether ``act_noise``/``act_from_noise`` exist for this module and env (the fused step needs them)."""
        return False

    def act_noise(
        self, generator: torch.Generator | None, lead: tuple[int, ...], device: torch.device | None = None
    ) -> torch.Tensor:
        """The random draws ``act_from_noise`` consumes for a batch of shape ``lead`` (``(B,)``, or ``(T, B)``)."""
        raise NotImplementedError(f"{type(self).__name__} does not act from pre-drawn noise")

    def act_from_noise(self, td: TensorDict, noise: torch.Tensor) -> TensorDict:
        """The training ``act`` as a pure function of ``td`` and one step's ``act_noise`` (no generator inside)."""
        raise NotImplementedError(f"{type(self).__name__} does not act from pre-drawn noise")

    @torch.no_grad()
    def forward(
        self,
        obs: Any,
        action_mask: Any = None,
        deterministic: bool = True,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """``module(obs)``: the action ``act`` takes for raw observations, outside the trainer (no state kept).

        ``obs`` is one observation (``obs_shape``) or a batch (``[B, *obs_shape]``), numpy or torch; ``action_mask``
        (bool, ``[n]`` or ``[B, n]``) where the env has masks. Returns the action tensor a ``BatchedEnv`` steps
        with (one row per observation, unbatched for one observation); observation statistics are only read.
        SPO acts with its prior (no search); DreamerV3 treats every call as the first step of fresh episodes.
        For actions in a Gymnasium env's own space (offsets, clipping, numpy), recurrent state (DreamerV3) and
        SPO's search, use ``rl_lightning.load_policy``.
        """
        td, single = obs_batch(obs, self.env_spec, self.device, action_mask)
        action = self.act(td, generator, deterministic=deterministic)[keys.ACTION]
        return action[0] if single else action

    def acting_policy(self, env: BatchedEnv, deterministic: bool = False, training: bool = True) -> Policy:
        """The policy a collector (``training=True``) or evaluator steps ``env`` with.

        The default is ``act``; search-based algorithms (SPO) override it to read ``env``'s current state.
        """
        return lambda obs, generator: self.act(obs, generator, deterministic=deterministic)

    def policy_factory(self) -> PolicyFactory:
        """The recipe an actor process builds its own copy of this module from (weights then arrive published)."""
        return PolicyFactory.of(self, constructor_args(self.hparams, type(self)))

    def check_config(self, datamodule: Any) -> None:  # noqa: B027 - optional hook
        """Setup-time arithmetic between module and datamodule; raise ``ValueError`` naming the fields."""

    def update(self, batch: TensorDict, optimizer: Any) -> TensorDict:
        """One learner update on ``batch``; returns detached loss terms (used by ``FailFast.reproduce``)."""
        raise NotImplementedError(f"{type(self).__name__} does not expose a replayable update")

    def step_each(self, batches: TensorDict, optimizer: Any) -> TensorDict:
        """A ``_gradient_step`` per batch along the leading dim of ``batches`` (``[G, T, B]``); mean terms."""
        totals: TensorDict | None = None
        for index in range(batches.batch_size[0]):
            stop.check()  # a stop request abandons the update; the checkpoint is the previous one's
            terms = self._gradient_step(batches[index], optimizer)
            fresh_low_precision_weights()  # the next step's forward must read this step's weights (bf16-mixed)
            follow_actors()  # with data.borrow_idle_actor_cores: the next step's threads (learner_threads.py)
            totals = terms if totals is None else totals + terms
        if totals is None:
            raise ValueError("step_each got no batches (leading dim 0)")
        return totals / batches.batch_size[0]

    def _gradient_step(self, batch: TensorDict, optimizer: Any) -> TensorDict:
        raise NotImplementedError(f"{type(self).__name__} takes no replay gradient steps")

    def backward_loss(self, loss: torch.Tensor) -> None:
        """``manual_backward`` inside a fit (precision, DDP hooks); plain ``backward`` outside (FailFast replays)."""
        if self._trainer is not None:
            self.manual_backward(loss)
        else:
            loss.backward()

    def process_rollout(self, batch: TensorDict) -> TensorDict:
        """Hook for on-policy data: add learning targets to a fresh rollout (identity by default)."""
        return batch

    def histogram_tensors(self) -> dict[str, torch.Tensor]:
        """``{tag: tensor}`` of the last update (from ``histogram_source``) for the ``Histograms`` callback, which
        calls it on its due updates only; an algorithm that supports histograms overrides it."""
        raise NotImplementedError(f"{type(self).__name__} writes no histograms")

    @property
    def env_steps(self) -> int:
        """Env steps collected so far over all ranks (the x-axis of every log)."""
        datamodule = self.trainer.datamodule if self._trainer is not None else None
        return int(getattr(datamodule, "env_steps", 0))

    @property
    def total_env_steps(self) -> int | None:
        datamodule = self.trainer.datamodule if self._trainer is not None else None
        return getattr(datamodule, "total_env_steps", None)

    def setup(self, stage: str) -> None:
        every = self.hparams.get(HISTOGRAMS_FIELD)
        if stage == "fit" and every is not None and not self.keep_histogram_source:  # callbacks' setup ran first
            raise ConfigError(
                f"model.{HISTOGRAMS_FIELD}={every}: the Histograms callback writes them and this Trainer has none; "
                f"add rl_lightning.callbacks.Histograms(every_n_updates={every}) to its callbacks (rl-lightning adds "
                "it for you)"
            )
        if not self._seeded:
            seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
            self.generator.manual_seed(seed + 7_919 * self.trainer.global_rank)
            self._seeded = True

    def on_train_start(self) -> None:
        budget = self.total_env_steps
        if budget is not None and self.env_steps >= budget:
            pl.utilities.rank_zero_warn(
                f"env-step budget already reached ({self.env_steps} >= data.total_env_steps={budget}); "
                "nothing to train: raise data.total_env_steps to continue"
            )
            self.trainer.should_stop = True

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        budget = self.total_env_steps
        if budget is not None and self.env_steps >= budget:
            self.trainer.should_stop = True

    def validation_step(self, request: Any) -> None:
        """``rl-lightning validate``: the ``EvalRequests`` callback plays ``request`` and logs ``eval/*``."""
        self._require_eval_requests("validate")

    def test_step(self, request: Any) -> None:
        """``rl-lightning test``: as ``validate``, logged under ``test/*``."""
        self._require_eval_requests("test")

    def _require_eval_requests(self, stage: str) -> None:
        """The module picks no evaluation (docs/architecture.md): a request nothing plays is refused, not skipped."""
        if not self.eval_requests_attached:
            raise ConfigError(
                f"{stage}: nothing plays the evaluation request; add rl_lightning.callbacks.EvalRequests() to the "
                "Trainer's callbacks (rl-lightning validate/test add it for you)"
            )

    def log_update(self, metrics: dict[str, Any]) -> None:
        """Log one update's metrics once, as one point each at the current env step; keep them in ``last_metrics``.

        Under DDP every logged value is the mean over ranks, taken here in one collective per update: each
        rank computes ``train/*`` on its own rollout, while the gradients (hence the weights) are the all-reduced
        ones, so the mean is the loss of the global batch the step actually took. Every rank then holds the same
        numbers, so callbacks that monitor them decide alike on all ranks. ``last_metrics`` keeps this rank's own
        values (what ``FailFast`` checks and replays).

        NaN scalars (e.g. episode stats of a rollout in which no episode finished) are kept in ``last_metrics``
        but not logged. The values are read back once per update (one host sync), outside the hot loops.
        ``publish_to_callbacks`` feeds monitors and the progress bar (``trainer.callback_metrics``, without
        ``self.log``'s per-key cost); ``log_at_env_step`` writes the loggers.
        """
        counters = {"env_steps": float(self.env_steps), "updates": float(self.updates)}  # global already
        self.last_metrics = {**metrics, **counters}
        logged = {**self._mean_over_ranks(metrics), **counters}
        scalars = finite_only(to_floats(logged))
        if self._trainer is not None:
            publish_to_callbacks(self.trainer, scalars)
            log_at_env_step(self.trainer, scalars, self.env_steps)

    def _mean_over_ranks(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """``metrics`` averaged over ranks in one all-reduce (identity on a single process)."""
        if self._trainer is None or self.trainer.world_size == 1 or not metrics:
            return metrics
        names = sorted(metrics)  # every rank logs the same keys; sorting fixes their order in the collective
        stacked = torch.stack([torch.as_tensor(metrics[k], dtype=torch.float32, device=self.device) for k in names])
        reduced = self.trainer.strategy.reduce(stacked.detach(), reduce_op="mean")
        return dict(zip(names, reduced.unbind()))

    def mark_update(self) -> None:
        """Call once per learner update, after the weights changed."""
        self.updates += 1
        self.policy_version += 1

    def revision(self) -> PolicyRevision:
        return PolicyRevision(
            self.policy_version, self.parent_version, self.family, weights_digest(self), self.parent_digest
        )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[REVISION_KEY] = self.revision().to_dict()
        checkpoint[COUNTERS_KEY] = {
            "updates": self.updates,
            "policy_version": self.policy_version,
            "parent_version": self.parent_version,
            "generator": self.generator.get_state(),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        fitting = self._trainer is None or self.trainer.state.fn not in ("validate", "test")
        check_family(checkpoint, self.family, accepted=() if fitting else self.plays_families)
        counters = checkpoint[COUNTERS_KEY]
        self.updates = int(counters["updates"])
        self.policy_version = int(counters["policy_version"])
        self.parent_version = self.policy_version
        self.generator.set_state(counters["generator"])
        self._seeded = True
