"""PPO (Schulman et al., 2017) as a LightningModule: one ``training_step`` = one PPO update."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning import keys, stop
from rl_lightning.algos.base import RLModule
from rl_lightning.algos.histograms import histograms_check, policy_histograms
from rl_lightning.algos.init_weights import load_init_weights
from rl_lightning.algos.magnet import Magnet
from rl_lightning.algos.optimizer_steps import OptimizerSteps
from rl_lightning.algos.selfplay_targets import TRAIN_KEY, selfplay_targets
from rl_lightning.envs.base import ACTION_KINDS, EnvSpec, require_action_kind
from rl_lightning.errors import ConfigError, check_fields, require_torch_compile
from rl_lightning.networks import distributions as D
from rl_lightning.networks.encoders import ObsEncoder
from rl_lightning.networks.mlp import flat_size, mlp
from rl_lightning.networks.normalizers import RewardScaler, observation_normalizer
from rl_lightning.objectives.gae import generalized_advantage_estimate
from rl_lightning.objectives.ppo import explained_variance, ppo_loss

REWARD_RETURNS_KEY = "reward_scaler_returns"
# What one optimiser step reports, in this order (logged as ``train/<name>``, averaged over the update's steps).
TERM_NAMES = ("loss", "loss_policy", "loss_value", "loss_entropy", "approx_kl", "clip_fraction", "entropy", "grad_norm")
_KL_INDEX = TERM_NAMES.index("approx_kl")
_UPDATE_KEYS = (keys.OBS, keys.ACTION, keys.LOGPROB, keys.VALUE, keys.ADVANTAGE, keys.RETURN)
_NOISE_KINDS = ("discrete", "box")  # action kinds whose sampling ``act_from_noise`` implements


class PPO(RLModule):
    """Proximal Policy Optimisation with actor and critic MLPs behind per-key observation encoders.

    Discrete envs get a masked categorical policy; continuous envs a Gaussian with a state-independent
    log-std (actions are sampled unclipped; the env clips them to its bounds); ``MultiDiscrete`` actions
    independent categoricals and ``MultiBinary`` actions independent Bernoullis. Observations of any dtype,
    ``Discrete`` and ``Dict`` observations go through an ``ObsEncoder`` (one encoder per key: a CNN per image key
    when ``encoder`` names one) before both MLPs.
    Each ``training_step`` pulls one rollout from the datamodule itself (so the collecting policy is the one
    being updated: lag 0), then runs ``update_epochs × num_minibatches`` optimiser steps on it, and logs once.

    In a multi-seat game (``env_spec.num_seats > 1``, self-play through ``data.seats``) each seat's decisions are
    its own trajectory: ``objectives/seat_credit.py`` credits each decision with what its seat receives until its
    next decision and bootstraps from that seat's next value; GAE runs along each seat's decisions. Only the learning
    seats' decisions whose credit is complete train (the minibatches split those rows; a remainder of fewer than
    ``num_minibatches`` rows sits out each epoch); a decision still open when the rollout ends trains in the next
    update, so ``policy/lag`` reads 1. ``normalize_reward`` is refused there (its running return is per game).

    Args:
        env_spec: linked from ``data.env_spec`` by the CLI.
        hidden_sizes: hidden layer widths of actor and critic (after the encoder; ``[]`` puts the linear policy
            and value heads straight on the encoder's features, as CleanRL's Atari agent does).
        activation: ``tanh``, ``relu``, ``elu`` or ``silu``.
        encoder: ``mlp`` (flatten every key; images scaled /255), ``nature`` or ``impala`` (that CNN for every
            rank-3 ``uint8`` image key, vector keys flattened beside it), or ``{key: choice}`` per observation key
            (``"/"``-joined nested keys, ``obs`` for a single array). Nature needs images >= 36×36.
        share_encoder: one encoder feeds both heads (CleanRL's Atari agent shares its CNN trunk); ``False`` gives
            the critic its own copy. Only matters for a CNN: ``mlp`` encoders have no parameters.
        lr: Adam learning rate.
        adam_eps: Adam epsilon (1e-5 as in the PPO reference implementations).
        anneal_lr: decay the learning rate linearly to 0 over ``data.total_env_steps``.
        anneal_clip: decay ``clip_coef`` linearly to 0 over ``data.total_env_steps`` as SB3's ``lin_`` schedules do:
            an update clips at ``clip_coef × (1 − env steps so far / total)``, its own rollout's steps included
            (SB3's ``progress_remaining``, clamped at 0); the value clip of ``clip_vloss`` follows it.
        gamma: discount.
        gae_lambda: GAE λ.
        update_epochs: passes over each rollout.
        num_minibatches: minibatches per pass; must divide ``num_envs × num_steps``.
        clip_coef: PPO ratio clip ε (also the value clip range with ``clip_vloss``).
        clip_vloss: clip the value loss around the rollout's values.
        ent_coef: entropy bonus weight.
        vf_coef: value loss weight.
        max_grad_norm: global gradient-norm clip (0 disables clipping).
        norm_adv: normalise advantages per minibatch.
        target_kl: stop an update early once an epoch's mean approx. KL exceeds this (``None``: never).
        init_log_std: initial log-std of the Gaussian policy (continuous envs).
        normalize_obs: feed actor and critic ``clip((obs - mean) / std, ±norm_clip_obs)`` with running
            statistics of the training observations (SB3 ``VecNormalize`` semantics). The rollout keeps raw
            observations; each rollout is acted on, bootstrapped and learned from with the statistics in force
            when it was collected, and its observations enter them after its update. Image observations
            (``uint8``, >= 3 dims) are left as they are.
        normalize_reward: divide the rewards used for GAE and value targets by the running std of the
            discounted return (per env, reset at episode ends; updated from each rollout before its GAE), then
            clip to ``±norm_clip_reward``. Episode-return metrics stay raw.
        norm_clip_obs: bound on normalised observations.
        norm_clip_reward: bound on scaled rewards.
        ortho_init: orthogonal initialisation of the actor and critic MLPs (gain √2, actor head 0.01, critic head
            1), as the PPO literature and SB3 do by default; ``False`` keeps PyTorch's default ``Linear`` init
            (SB3's ``ortho_init=False``, which rl-zoo's MuJoCo settings use).
        compile_update: run each minibatch's forward pass and loss (and so their backward) through
            ``torch.compile`` (inductor; compiled once per run, on the first update, with fixed shapes). Off by
            default: it pays on long runs whose minibatch steps are overhead-bound (benchmarks/README.md has the
            measured speed-up and compile time); gradients agree with eager within float tolerance.
        init_weights: a ``.ckpt`` of a BC or PPO run whose network weights (and observation statistics) this run
            starts from: weights only, not a resume (counters, optimiser and env steps start at zero; the lineage
            keeps the parent's weight digest). Refused in one line if missing, of another env, or of other shapes.
        histograms_every_n_updates: every this many updates, write TensorBoard histograms of the rollout's
            advantages, returns and values, the policy's logits (or means and log-std) and the normaliser
            statistics (the ``Histograms`` callback); ``None`` (default) writes none and costs nothing.
        magnet: add ``coef · KL(π ‖ magnet)`` to the loss (Magnetic Mirror Descent; ``algos/magnet.py``): ``uniform``,
            ``ema`` or ``initial`` (the ``init_weights`` policy), or ``{kind, coef, schedule: constant | linear |
            exponential, final_coef, decay_env_steps, ema_tau}``; logs ``train/magnet_kl``. ``None``: off.
        critic_warmup_updates: for this many first updates only the value loss trains (the actor keeps its
            ``init_weights``, e.g. a behaviour-cloned policy, while the critic learns its values, so the first policy
            updates follow meaningful advantages). 0: off.
    """

    family = "ppo"
    plays_families = ("bc",)  # ``validate``/``test`` a BC clone's checkpoint: the same networks

    def __init__(
        self,
        env_spec: EnvSpec | None = None,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: str = "tanh",
        encoder: str | dict[str, str] = "mlp",
        share_encoder: bool = True,
        lr: float = 3e-4,
        adam_eps: float = 1e-5,
        anneal_lr: bool = False,
        anneal_clip: bool = False,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        update_epochs: int = 4,
        num_minibatches: int = 4,
        clip_coef: float = 0.2,
        clip_vloss: bool = False,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float = 0.5,
        norm_adv: bool = True,
        target_kl: float | None = None,
        init_log_std: float = 0.0,
        normalize_obs: bool = False,
        normalize_reward: bool = False,
        norm_clip_obs: float = 10.0,
        norm_clip_reward: float = 10.0,
        ortho_init: bool = True,
        compile_update: bool = False,
        init_weights: str | None = None,
        histograms_every_n_updates: int | None = None,
        magnet: str | dict[str, Any] | None = None,
        critic_warmup_updates: int = 0,
    ) -> None:
        super().__init__(env_spec)
        self.save_hyperparameters()
        _check_hparams(self.hparams)
        if compile_update:
            require_torch_compile("model.compile_update")
        spec = self.env_spec
        if normalize_reward and spec.num_seats > 1:
            raise ConfigError(
                "model.normalize_reward=true is not supported in multi-seat games (its running return is per game, "
                "not per seat); set model.normalize_reward: false"
            )
        require_action_kind(spec, "PPO", ACTION_KINDS)
        self.encoder = ObsEncoder(spec, encoder)
        self.critic_encoder = None if share_encoder else ObsEncoder(spec, encoder)
        obs_dim = self.encoder.out_dim
        kind = spec.action_kind
        out_dim = {"discrete": spec.num_actions, "multi_discrete": sum(spec.action_nvec)}.get(
            kind, flat_size(spec.action_shape)
        )
        self.action_width = out_dim
        self.actor = mlp(obs_dim, out_dim, hidden_sizes, activation, output_gain=0.01, orthogonal=ortho_init)
        self.critic = mlp(obs_dim, 1, hidden_sizes, activation, output_gain=1.0, orthogonal=ortho_init)
        if kind == "box":
            self.log_std = nn.Parameter(torch.full((out_dim,), float(init_log_std)))
        # Statistics are buffers: checkpointed with the weights, updated only from training rollouts.
        self.obs_normalizer = observation_normalizer(spec, norm_clip_obs) if normalize_obs else None
        self.reward_scaler = RewardScaler(gamma, norm_clip_reward) if normalize_reward else None
        if anneal_clip:  # a buffer filled in place: a compiled loss reads the new value without recompiling
            self.register_buffer("clip_now", torch.tensor(float(clip_coef)), persistent=False)
        # The value V(obs) of each rollout row: where the critic shares a CNN's features with the actor it comes
        # with the action (the features are there); otherwise ``process_rollout`` computes it for the whole rollout
        # in one batched forward (the weights cannot change during a rollout), not one small forward per step.
        self._value_when_acting = share_encoder and any(True for _ in self.encoder.parameters())
        if init_weights:  # after every weight and buffer exists; before any trainer or env (one-line refusals)
            self.parent_digest = load_init_weights(self, init_weights, families=("bc", "ppo"))
        self.magnet = None if magnet is None else Magnet(self, magnet)  # after init_weights: ``initial`` copies them

    # ----- acting -------------------------------------------------------------------------------------------
    def _obs(self, td: TensorDict) -> torch.Tensor | TensorDict:
        obs = td[keys.OBS]
        return obs if self.obs_normalizer is None else self.obs_normalizer(obs)

    def _features(self, td: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actor features, critic features)``: one tensor twice when the encoder is shared."""
        obs = self._obs(td)
        features = self.encoder(obs)
        return features, features if self.critic_encoder is None else self.critic_encoder(obs)

    def _critic_features(self, td: TensorDict) -> torch.Tensor:
        return (self.encoder if self.critic_encoder is None else self.critic_encoder)(self._obs(td))

    def _logits(self, td: TensorDict, features: torch.Tensor) -> torch.Tensor:
        return D.masked_logits(self.actor(features), td.get(keys.ACTION_MASK, None))

    @property
    def acts_from_noise(self) -> bool:
        """Discrete and Box actions: sampling is one noise draw per action logit or dimension."""
        return self.env_spec.action_kind in _NOISE_KINDS

    def act_noise(
        self, generator: torch.Generator | None, lead: tuple[int, ...], device: torch.device | None = None
    ) -> torch.Tensor:
        """``[*lead, width]`` draws from ``generator``: ``U[0, 1)`` per logit (Gumbel-max) for Discrete actions,
        ``N(0, 1)`` per dimension for Box actions; exactly what ``act`` draws for a batch of shape ``lead``."""
        if device is None:  # a TensorDict without a device, or no generator (the global one draws)
            device = generator.device if generator is not None else self.device
        dtype = self.actor[-1].weight.dtype
        shape = (*lead, self.action_width)
        if self.env_spec.action_kind == "discrete":
            return torch.rand(shape, generator=generator, device=device, dtype=dtype)
        return torch.randn(shape, generator=generator, device=device, dtype=dtype)

    @torch.no_grad()
    def act_from_noise(self, td: TensorDict, noise: torch.Tensor) -> TensorDict:
        """The training ``act`` (``action``, ``logprob``, and ``value`` where it comes with the action) with its
        sampling noise given: pure, compilable."""
        features, critic_features = self._features(td)
        if self.env_spec.action_kind == "discrete":
            logits = self._logits(td, features)
            action = D.categorical_from_uniform(logits, noise)
            logprob = D.categorical_log_prob(logits, action)
        else:
            mean = self.actor(features)
            log_std = self.log_std.expand_as(mean)
            action = D.normal_from_noise(mean, log_std, noise)
            logprob = D.normal_log_prob(mean, log_std, action)
        out = {keys.ACTION: action, keys.LOGPROB: logprob}
        if self._value_when_acting:  # else ``process_rollout`` computes the values, one batched forward
            out[keys.VALUE] = self.critic(critic_features).squeeze(-1)
        return TensorDict(out, batch_size=td.batch_size, device=td.device)

    @torch.no_grad()
    def act(self, td: TensorDict, generator: torch.Generator | None = None, deterministic: bool = False) -> TensorDict:
        if not deterministic and self.acts_from_noise:
            return self.act_from_noise(td, self.act_noise(generator, tuple(td.batch_size), td.device))
        features, critic_features = self._features(td)
        return self._act_on(td, features, critic_features, generator, deterministic)

    def _act_on(
        self,
        td: TensorDict,
        features: torch.Tensor,
        critic_features: torch.Tensor,
        generator: torch.Generator | None,
        deterministic: bool,
    ) -> TensorDict:
        """``act`` on encoded features (``RecurrentPPO`` passes its recurrent core's outputs)."""
        out: dict[str, torch.Tensor] = {}
        kind = self.env_spec.action_kind
        if kind == "discrete":
            logits = self._logits(td, features)
            action = logits.argmax(-1) if deterministic else D.categorical_sample(logits, generator)
            out[keys.LOGPROB] = D.categorical_log_prob(logits, action)
        elif kind == "box":
            mean = self.actor(features)
            log_std = self.log_std.expand_as(mean)
            action = mean if deterministic else D.normal_sample(mean, log_std, generator)
            out[keys.LOGPROB] = D.normal_log_prob(mean, log_std, action)
        else:
            logits = self.actor(features)
            flat = self._multi_sample(logits, generator, deterministic)
            out[keys.LOGPROB] = self._multi_log_prob(logits, flat)
            action = flat.reshape(*td.batch_size, *self.env_spec.action_shape)
        out[keys.ACTION] = action
        if not deterministic and self._value_when_acting:
            out[keys.VALUE] = self.critic(critic_features).squeeze(-1)
        return TensorDict(out, batch_size=td.batch_size, device=td.device)

    def evaluate_actions(self, td: TensorDict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logprob, entropy, value)`` of the stored actions under the current weights (with gradients)."""
        return self._log_prob_entropy_value(self._obs(td), td[keys.ACTION], td.get(keys.ACTION_MASK, None))

    def _log_prob_entropy_value(
        self, obs: torch.Tensor | TensorDict, action: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``evaluate_actions`` on observations already normalised (the update normalises a rollout once)."""
        features = self.encoder(obs)
        critic_features = features if self.critic_encoder is None else self.critic_encoder(obs)
        return self._heads_log_prob_entropy_value(features, critic_features, action, mask)

    def _heads_log_prob_entropy_value(
        self, features: torch.Tensor, critic_features: torch.Tensor, action: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``_log_prob_entropy_value`` on encoded ``[N, F]`` features (``RecurrentPPO``: its core's outputs)."""
        kind = self.env_spec.action_kind
        if kind == "discrete":
            logits = D.masked_logits(self.actor(features), mask)
            logprob, entropy = D.categorical_log_prob(logits, action), D.categorical_entropy(logits)
        elif kind == "box":
            mean = self.actor(features)
            log_std = self.log_std.expand_as(mean)
            logprob, entropy = D.normal_log_prob(mean, log_std, action), D.normal_entropy(log_std)
        else:
            logits = self.actor(features)
            logprob = self._multi_log_prob(logits, action.reshape(action.shape[0], -1))
            entropy = self._multi_entropy(logits)
        return logprob, entropy, self.critic(critic_features).squeeze(-1)

    # MultiDiscrete: independent categoricals over the logits split by ``nvec``; MultiBinary: independent Bernoullis.
    def _multi_sample(self, logits: torch.Tensor, generator: Any, deterministic: bool) -> torch.Tensor:
        nvec = self.env_spec.action_nvec
        if nvec:
            return D.multi_categorical_sample(logits, nvec, generator, deterministic)
        return D.bernoulli_sample(logits, generator, deterministic)

    def _multi_log_prob(self, logits: torch.Tensor, flat_action: torch.Tensor) -> torch.Tensor:
        nvec = self.env_spec.action_nvec
        if nvec:
            return D.multi_categorical_log_prob(logits, nvec, flat_action)
        return D.bernoulli_log_prob(logits, flat_action)

    def _multi_entropy(self, logits: torch.Tensor) -> torch.Tensor:
        nvec = self.env_spec.action_nvec
        return D.multi_categorical_entropy(logits, nvec) if nvec else D.bernoulli_entropy(logits)

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

    # ----- learning -----------------------------------------------------------------------------------------
    def configure_optimizers(self) -> torch.optim.Optimizer:
        # The fused kernel is ~20% faster than the default per-tensor path for these small nets on CPU.
        fused = self.device.type in ("cpu", "cuda")
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, eps=self.hparams.adam_eps, fused=fused)

    def check_config(self, datamodule: Any) -> None:
        """Setup-time arithmetic: the rollout must split into ``num_minibatches`` equal minibatches of ≥ 2."""
        rollout_size = int(datamodule.rollout_size)
        n = self.hparams.num_minibatches
        if rollout_size % n != 0 or rollout_size // n < 2:
            raise ConfigError(
                f"model.num_minibatches={n} does not split the rollout of data.num_envs × data.num_steps = "
                f"{rollout_size} into equal minibatches of >= 2; choose a divisor of {rollout_size}"
            )

    def training_step(self, dataloader_iter: Iterator[Any]) -> None:
        rollout, _, _ = next(dataloader_iter)
        batch = rollout.batch.reshape(-1)
        collected, observed = batch.numel(), batch[keys.OBS]
        if TRAIN_KEY in batch:  # self-play: only learning seats' complete decisions train; carried rows are no steps
            collected -= int(self.env_spec.num_seats * rollout.batch.batch_size[1])
            observed = batch[keys.OBS][~batch["carried"]]
            batch = batch[batch[TRAIN_KEY]]
        hp = self.hparams
        optimizer = self.optimizers()
        if hp.anneal_lr and self.total_env_steps:
            frac = 1.0 - min(self.env_steps - collected * self.trainer.world_size, self.total_env_steps) / (
                self.total_env_steps
            )
            for group in optimizer.param_groups:
                group["lr"] = frac * hp.lr
        if hp.anneal_clip and self.total_env_steps:  # SB3 counts the rollout just collected (lr above does not)
            self.clip_now.fill_(hp.clip_coef * (1.0 - min(self.env_steps, self.total_env_steps) / self.total_env_steps))
        if self.magnet is not None:
            self.magnet.before_update(self)
        stats = self.update(batch, optimizer)
        if self.keep_histogram_source:  # the Histograms callback reads it after this step, then drops it
            self.histogram_source = batch
        if self.obs_normalizer is not None:  # after the update: it learns from the inputs the rollout was acted on
            self.obs_normalizer.update(observed)
        self.mark_update()
        self._log_update(batch, rollout.stats, stats)

    def update(self, batch: TensorDict, optimizer: Any) -> TensorDict:
        """One PPO update on a processed rollout (flattened here): ``update_epochs × num_minibatches`` optimiser steps.

        Returns the minibatch-averaged loss terms and diagnostics (detached). Works attached to a Trainer or
        standalone (``FailFast.reproduce`` replays a failing update this way).

        The minibatch loop is kept lean (the profile in benchmarks/README.md): the columns it needs are pulled out
        of the TensorDict once (observations normalised once), shuffled with one gather per epoch and sliced as
        views per minibatch; the terms are stacked into one tensor per step and summed on the device (read once,
        when logged).
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
        columns = {key: batch[key] for key in _UPDATE_KEYS}
        columns[keys.OBS] = self._obs(batch)  # the statistics are frozen during an update: normalise once
        if keys.ACTION_MASK in batch:
            columns[keys.ACTION_MASK] = batch[keys.ACTION_MASK]
        def epoch() -> Iterator[dict[str, Any]]:
            perm = torch.randperm(batch.numel(), generator=self.generator)[:size].to(batch.device)
            shuffled = {key: value[perm] for key, value in columns.items()}
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
        sums = torch.zeros(len(TERM_NAMES), device=self.device)
        steps = 0
        for _ in range(hp.update_epochs):
            epoch_kl = torch.zeros((), device=self.device)
            for mb in epoch():
                stop.check()  # a stop request abandons the update; the checkpoint is the previous one's
                terms = self._minibatch_step(mb, steps_runner, params, max_norm)
                sums += terms
                epoch_kl += terms[_KL_INDEX]
                steps += 1
            if hp.target_kl is not None:
                mean_kl = epoch_kl / hp.num_minibatches
                if self._trainer is not None:
                    mean_kl = self.trainer.strategy.reduce(mean_kl, reduce_op="mean")
                if mean_kl > hp.target_kl:  # one host sync per epoch, only with target_kl
                    break
        steps_runner.finish()
        return TensorDict(dict(zip(TERM_NAMES, (sums / steps).unbind())), batch_size=[])

    def _minibatch_step(
        self, mb: dict[str, Any], optimizer: OptimizerSteps, params: list[torch.Tensor], max_norm: float
    ) -> torch.Tensor:
        """One optimiser step; returns the ``TERM_NAMES`` values stacked (detached)."""
        loss, terms = self._minibatch_loss(mb)
        optimizer.zero_grad()
        optimizer.backward(loss)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
        optimizer.step()
        return torch.cat([terms, grad_norm.reshape(1)])

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

    def _evaluate_minibatch(self, mb: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logprob, entropy, value)`` of a minibatch's stored actions (``RecurrentPPO`` replays sequences)."""
        return self._log_prob_entropy_value(mb[keys.OBS], mb[keys.ACTION], mb.get(keys.ACTION_MASK))

    def minibatch_loss(self, mb: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, terms)`` of one minibatch: the PPO loss to back-propagate and the ``TERM_NAMES`` values but the
        gradient norm, stacked and detached. Pure tensor code, so ``torch.compile`` can fuse it (``compile_update``)."""
        hp = self.hparams
        logprob, entropy, value = self._evaluate_minibatch(mb)
        advantage = mb[keys.ADVANTAGE]
        if hp.norm_adv:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        terms = ppo_loss(
            logprob,
            mb[keys.LOGPROB],
            advantage,
            value,
            mb[keys.VALUE],
            mb[keys.RETURN],
            entropy,
            self.clip_now if hp.anneal_clip else hp.clip_coef,
            hp.clip_vloss,
            hp.vf_coef,
            hp.ent_coef,
        )
        loss = terms["loss"] if self.magnet is None else terms["loss"] + self.magnet.loss(self, mb)
        if self.updates < hp.critic_warmup_updates:  # the critic learns the start policy's values; the actor waits
            loss = hp.vf_coef * terms["loss_value"]
        return loss, torch.stack([terms[name] for name in TERM_NAMES[:-1]]).detach()

    @torch.no_grad()
    def histogram_tensors(self) -> dict[str, torch.Tensor]:
        """The last update's advantages, returns and values, and the updated policy's outputs on its rows."""
        batch = self.histogram_source
        return policy_histograms(self, batch, self.encoder(self._obs(batch)))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        if self.reward_scaler is not None:  # rank-local, not a buffer: gathered so every rank resumes its own
            checkpoint[REWARD_RETURNS_KEY] = self.reward_scaler.returns_per_rank()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        if self.reward_scaler is not None and REWARD_RETURNS_KEY in checkpoint:
            self.reward_scaler.load_returns_per_rank(checkpoint[REWARD_RETURNS_KEY])

    def _log_update(self, batch: TensorDict, rollout_stats: dict[str, torch.Tensor], terms: TensorDict) -> None:
        metrics: dict[str, Any] = {f"train/{k}": v for k, v in terms.items()}
        metrics["train/explained_variance"] = explained_variance(batch[keys.VALUE], batch[keys.RETURN])
        metrics["train/lr"] = torch.tensor(self.optimizers().param_groups[0]["lr"])
        if self.hparams.anneal_clip:
            metrics["train/clip_coef"] = self.clip_now.clone()
        metrics["policy/lag"] = (self.policy_version - 1 - batch[keys.POLICY_VERSION]).max().float()
        if self.env_spec.action_kind == "box":
            metrics["policy/std"] = self.log_std.detach().exp().mean()
        for key, value in rollout_stats.items():
            metrics[key] = value
        if self.magnet is not None:
            metrics.update(self.magnet.metrics())
        self.log_update(metrics)


def _check_hparams(hp: Any) -> None:
    checks = [
        ("update_epochs", hp.update_epochs >= 1, "use >= 1"),
        ("num_minibatches", hp.num_minibatches >= 1, "use >= 1"),
        ("lr", hp.lr > 0, "use a positive learning rate, e.g. 3e-4"),
        ("gamma", 0.0 <= hp.gamma <= 1.0, "use a discount in [0, 1]"),
        ("gae_lambda", 0.0 <= hp.gae_lambda <= 1.0, "use λ in [0, 1]"),
        ("clip_coef", hp.clip_coef > 0, "use a positive clip, e.g. 0.2"),
        ("max_grad_norm", hp.max_grad_norm >= 0, "use 0 (off) or a positive norm"),
        ("target_kl", hp.target_kl is None or hp.target_kl > 0, "use null or a positive KL"),
        ("norm_clip_obs", hp.norm_clip_obs > 0, "use a positive bound, e.g. 10"),
        ("norm_clip_reward", hp.norm_clip_reward > 0, "use a positive bound, e.g. 10"),
        ("critic_warmup_updates", hp.critic_warmup_updates >= 0, "use 0 (off) or a number of updates"),
        histograms_check(hp.histograms_every_n_updates),
    ]
    check_fields(checks, hp)
