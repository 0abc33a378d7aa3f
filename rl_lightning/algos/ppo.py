"""PPO (Schulman et al., 2017) as a LightningModule: one ``training_step`` = one PPO update."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning import keys
from rl_lightning.algos.base import RLModule
from rl_lightning.algos.histograms import policy_histograms
from rl_lightning.algos.init_weights import load_init_weights
from rl_lightning.algos.magnet import Magnet
from rl_lightning.algos.ppo_checks import (
    check_against_env,
    check_critic_input,
    check_hparams,
    check_observation_table,
)
from rl_lightning.algos.ppo_policy import PPOPolicy
from rl_lightning.algos.ppo_update import TERM_NAMES, PPOUpdate
from rl_lightning.algos.selfplay_targets import TRAIN_KEY
from rl_lightning.envs.base import ACTION_KINDS, EnvSpec, require_action_kind
from rl_lightning.errors import ConfigError, require_torch_compile
from rl_lightning.networks.encoders import ObsEncoder
from rl_lightning.networks.mlp import flat_size, mlp
from rl_lightning.networks.normalizers import RewardScaler, observation_normalizer
from rl_lightning.networks.observation_table import TableCorrected
from rl_lightning.objectives.ppo import explained_variance, ppo_loss

REWARD_RETURNS_KEY = "reward_scaler_returns"
__all__ = ["PPO", "REWARD_RETURNS_KEY", "TERM_NAMES", "TRAIN_KEY"]  # TERM_NAMES, TRAIN_KEY: RecurrentPPO, benchmarks


class PPO(PPOPolicy, PPOUpdate, RLModule):
    """Proximal Policy Optimisation with actor and critic MLPs behind per-key observation encoders.

    Discrete envs get a masked categorical policy; continuous envs a Gaussian with a state-independent
    log-std, or with ``sde`` gSDE's state-dependent noise (actions are sampled unclipped; the env clips them to its
    bounds); ``MultiDiscrete`` actions independent categoricals and ``MultiBinary`` actions independent Bernoullis.
    Observations of any dtype, ``Discrete`` and ``Dict`` observations go through an ``ObsEncoder`` (one encoder per
    key: a CNN per image key when ``encoder`` names one) before both MLPs.
    Each ``training_step`` pulls one rollout from the datamodule itself (so the collecting policy is the one
    being updated: lag 0), then runs ``update_epochs × num_minibatches`` optimiser steps on it, and logs once.
    Acting and evaluating stored actions live in ``algos/ppo_policy.py`` (``PPOPolicy``), a rollout's targets and the
    minibatch loop in ``algos/ppo_update.py`` (``PPOUpdate``); the loss of one minibatch is ``minibatch_loss`` here.

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
        anneal_lr_start: with ``anneal_lr``, the fraction of ``data.total_env_steps`` for which the learning rate
            stays at ``lr`` before its linear decay to 0 at the end begins (0: decay over the whole run). A late
            decay damps the sampling noise of the last iterate once a regularised self-play run is near its
            equilibrium, where a decay over the whole run slows it down before it gets there.
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
        init_log_std: initial log-std of the Gaussian policy (continuous envs); with ``sde``, of every entry of
            gSDE's ``[L, A]`` log-std matrix.
        sde: generalized state-dependent exploration for Box actions (gSDE; Raffin et al., 2022; SB3's
            ``use_sde``, ``networks/sde.py``): the exploration noise is the actor's last hidden features (width
            ``L``, detached) times an ``[L, A]`` matrix drawn per env at the start of each rollout and held through
            it, so it is a smooth function of the state; ``log_std`` becomes that matrix's ``[L, A]`` log-std. The
            deterministic action (evaluation) is the mean either way. Not with ``data.compile``, ``data.num_actors``
            or ``RecurrentPPO``; needs ``hidden_sizes`` non-empty.
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
        compile_update: run each minibatch step through ``torch.compile`` (inductor; compiled once per run, on
            the first update, with fixed shapes): the whole step (loss, gradients by ``torch.func``, clipping and
            Adam, ``algos/compiled_step.py``) on one device in full precision with no gradient hook, else the
            forward pass and loss alone (said in one line). Off by default: it pays on long runs whose minibatch
            steps are overhead-bound (a 64×64 MLP on 64 rows: 0.98 ms against 3.0-3.5 ms eager; the first compile
            takes ~40 s on a slow core, a few seconds once inductor's cache holds it); weights agree with eager
            within float tolerance.
        init_weights: a ``.ckpt`` of a BC or PPO run whose network weights (and observation statistics) this run
            starts from: weights only, not a resume (counters, optimiser and env steps start at zero; the lineage
            keeps the parent's weight digest). Refused in one line if missing, of another env, or of other shapes.
        histograms_every_n_updates: every this many updates, write TensorBoard histograms of the rollout's
            advantages, returns and values, the policy's logits (or means and log-std) and the normaliser
            statistics (the ``Histograms`` callback); ``None`` (default) writes none and costs nothing.
        magnet: add ``coef · KL(π ‖ magnet)`` to the loss (Magnetic Mirror Descent; ``algos/magnet.py``): ``uniform``,
            ``ema`` or ``initial`` (the ``init_weights`` policy), or ``{kind, coef, schedule: constant | linear |
            exponential, final_coef, decay_env_steps, ema_tau, lr_follows_below, ...}`` (``lr_follows_below``: below
            that weight the lr is scaled by ``weight / lr_follows_below``); logs ``train/magnet_kl``. ``None``: off.
        critic_warmup_updates: for this many first updates only the value loss trains (the actor keeps its
            ``init_weights``, e.g. a behaviour-cloned policy, while the critic learns its values, so the first policy
            updates follow meaningful advantages). 0: off.
        policy_table_rows: add a learned logit correction per distinct observation to the actor, hashed into this
            many rows (``networks/observation_table.py``), so each information set of a small game owns part of its
            policy that the shared network cannot bias toward the common sets' answers. For the integer-valued
            observations of small games (OpenSpiel information states; e.g. 65536 rows for Leduc's 936 sets);
            Discrete actions, a parameter-free encoder and ``normalize_obs: false``. 0: off.
        policy_table_lr_scale: the table's learning rate as a multiple of ``lr`` (it follows the same schedule):
            Adam moves a row by ~lr per update it is visited in, so rows of rare sets need a larger lr to travel
            as far over a run as the shared weights do. 1.0: the same lr.
        value_table_rows: the same for the critic: a learned value correction per distinct observation (same hash,
            same requirements but any action kind), so a rarely reached set's value answers its own returns, not
            the common sets'; matters where advantages bootstrap from it (``gae_lambda`` < 1). 0: off.
        value_table_lr_scale: the value table's learning rate as a multiple of ``lr``. 1.0: the same lr.
        critic_input: what the critic reads: ``obs`` (the acting seat's own view, as the policy) or ``critic_obs``
            (every seat's view, from a game env with ``critic_obs: true``): a centralised critic that sees the hidden
            cards. Its values are a baseline that may depend on anything the action does not change, so the policy
            gradient stays unbiased while the card luck leaves the advantages (benchmarks/NOTES.md: Leduc's late
            decisions' noise falls from ~3.2 to ~2.1 chips). Training only: the policy, exports and evaluations
            read ``obs`` alone.
    """

    family = "ppo"
    plays_families = ("bc",)  # ``validate``/``test`` a BC clone's checkpoint: the same networks
    supports_actor_processes = True

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
        anneal_lr_start: float = 0.0,
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
        sde: bool = False,
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
        policy_table_rows: int = 0,
        policy_table_lr_scale: float = 1.0,
        value_table_rows: int = 0,
        value_table_lr_scale: float = 1.0,
        critic_input: str = "obs",
    ) -> None:
        super().__init__(env_spec)
        self.save_hyperparameters()
        check_hparams(self.hparams)
        if compile_update:
            require_torch_compile("model.compile_update")
        spec = self.env_spec
        require_action_kind(spec, "PPO", ACTION_KINDS)
        self.encoder = ObsEncoder(spec, encoder)
        check_against_env(self.hparams, spec, self.encoder)
        self.critic_reads_state = check_critic_input(critic_input, spec, normalize_obs)
        separate = not share_encoder and not self.critic_reads_state  # the centralised critic reads its own input
        self.critic_encoder = ObsEncoder(spec, encoder) if separate else None
        self._build_heads(spec)
        # Statistics are buffers: checkpointed with the weights, updated only from training rollouts.
        self.obs_normalizer = observation_normalizer(spec, norm_clip_obs) if normalize_obs else None
        self.reward_scaler = RewardScaler(gamma, norm_clip_reward) if normalize_reward else None
        if anneal_clip:  # a buffer filled in place: a compiled loss reads the new value without recompiling
            self.register_buffer("clip_now", torch.tensor(float(clip_coef)), persistent=False)
        # The value V(obs) of each rollout row: where the critic shares a CNN's features (or a fixed decoding's, the
        # costly part of a Hearts forward) with the actor it comes with the action (the features are there);
        # otherwise ``process_rollout`` computes it for the whole rollout in one batched forward (the weights cannot
        # change during a rollout), not one small forward per step.
        shared_work = any(True for _ in self.encoder.parameters()) or self.encoder.fixed_decoding
        self._value_when_acting = share_encoder and shared_work and not self.critic_reads_state
        if init_weights:  # after every weight and buffer exists; before any trainer or env (one-line refusals)
            self.parent_digest = load_init_weights(self, init_weights, families=("bc", "ppo"))
        self.magnet = None if magnet is None else Magnet(self, magnet)  # after init_weights: ``initial`` copies them

    def _build_heads(self, spec: EnvSpec) -> None:
        """The actor and critic MLPs, their optional per-observation tables and, for Box actions, the log-std."""
        hp = self.hparams
        obs_dim = self.encoder.out_dim
        critic_dim = math.prod(spec.critic_obs_shape) if self.critic_reads_state else obs_dim
        kind = spec.action_kind
        out_dim = {"discrete": spec.num_actions, "multi_discrete": sum(spec.action_nvec)}.get(
            kind, flat_size(spec.action_shape)
        )
        self.action_width = out_dim
        sizes, act, ortho = hp.hidden_sizes, hp.activation, hp.ortho_init
        self.actor = mlp(obs_dim, out_dim, sizes, act, output_gain=0.01, orthogonal=ortho, float32=True)
        self.critic = mlp(critic_dim, 1, sizes, act, output_gain=1.0, orthogonal=ortho, float32=True)
        if hp.policy_table_rows:
            check_observation_table("policy_table_rows", spec, self.encoder, hp.normalize_obs, discrete=True)
            self.actor = TableCorrected(self.actor, obs_dim, out_dim, hp.policy_table_rows)
        if hp.value_table_rows:
            check_observation_table("value_table_rows", spec, self.encoder, hp.normalize_obs, discrete=False)
            self.critic = TableCorrected(self.critic, critic_dim, 1, hp.value_table_rows)
        if kind == "box":  # gSDE: one log-std per (last hidden feature, action dimension)
            shape = (hp.hidden_sizes[-1], out_dim) if hp.sde else (out_dim,)
            self.log_std = nn.Parameter(torch.full(shape, float(hp.init_log_std)))

    # ----- learning -----------------------------------------------------------------------------------------
    def configure_optimizers(self) -> torch.optim.Optimizer:
        # The fused kernel is ~20% faster than the default per-tensor path for these small nets on CPU.
        fused = self.device.type in ("cpu", "cuda")
        hp = self.hparams
        tables = [(head.table, hp.get(f"{name}_table_lr_scale", 1.0)) for name, head in
                  (("policy", self.actor), ("value", self.critic)) if isinstance(head, TableCorrected)]  # fmt: skip
        params: Any = self.parameters()
        if tables:  # each table its own group: its own lr multiple, on the same schedule
            rest = [p for p in self.parameters() if all(p is not table for table, _ in tables)]
            params = [{"params": rest, "lr_scale": 1.0}]
            params += [{"params": [table], "lr": hp.lr * scale, "lr_scale": scale} for table, scale in tables]
        return torch.optim.Adam(params, lr=hp.lr, eps=hp.adam_eps, fused=fused)

    def check_config(self, datamodule: Any) -> None:
        """Setup-time arithmetic: the rollout must split into ``num_minibatches`` equal minibatches of ≥ 2; gSDE's
        per-rollout noise lives in the learner's collector (no actor processes)."""
        if self.hparams.get("sde", False) and getattr(datamodule, "num_actors", 0):
            raise ConfigError(
                "model.sde=true draws its exploration matrices in the learner's collector; "
                f"data.num_actors={datamodule.num_actors} collects elsewhere: set data.num_actors: 0"
            )
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
        frac = 1.0
        if hp.anneal_lr and self.total_env_steps:
            done = self.env_steps - collected * self.trainer.world_size  # before this rollout, as before
            frac = lr_fraction(done, self.total_env_steps, hp.anneal_lr_start)
        if hp.anneal_clip and self.total_env_steps:  # SB3 counts the rollout just collected (lr above does not)
            self.clip_now.fill_(hp.clip_coef * (1.0 - min(self.env_steps, self.total_env_steps) / self.total_env_steps))
        if self.magnet is not None:
            self.magnet.before_update(self)
            frac *= self.magnet.lr_scale()
        if hp.anneal_lr or (self.magnet is not None and self.magnet.settings["lr_follows_below"] is not None):
            for group in optimizer.param_groups:
                group["lr"] = frac * hp.lr * group.get("lr_scale", 1.0)
        stats = self.update(batch, optimizer)
        if self.keep_histogram_source:  # the Histograms callback reads it after this step, then drops it
            self.histogram_source = batch
        if self.obs_normalizer is not None:  # after the update: it learns from the inputs the rollout was acted on
            self.obs_normalizer.update(observed)
        self.mark_update()
        self._log_update(batch, rollout.stats, stats)

    def _evaluate_minibatch(self, mb: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logprob, entropy, value)`` of a minibatch's stored actions (``RecurrentPPO`` replays sequences)."""
        if self.critic_reads_state:  # the centralised critic reads every seat's view
            features = mb[keys.FEATURES] if keys.FEATURES in mb else self.encoder(mb[keys.OBS])
            critic_features = mb[keys.CRITIC_OBS].float()
            return self._heads_log_prob_entropy_value(features, critic_features, mb[keys.ACTION],
                                                      mb.get(keys.ACTION_MASK))  # fmt: skip
        if keys.FEATURES in mb:  # decoded once per update (``PPOUpdate.update``): the critic reads the same features
            features = mb[keys.FEATURES]
            return self._heads_log_prob_entropy_value(features, features, mb[keys.ACTION], mb.get(keys.ACTION_MASK))
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
        # ``self.updates`` is read only with a warm-up: an int attribute is a static guard of ``torch.compile``, so
        # reading it recompiles the compiled loss (``compile_update``) at every update.
        if hp.critic_warmup_updates and self.updates < hp.critic_warmup_updates:  # the actor waits; the critic learns
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


def ppo_arguments(frame: Any) -> dict[str, Any]:
    """``PPO.__init__``'s whole argument set from its running frame: what a subclass whose ``__init__`` takes fewer
    (``BC``, ``AlphaZero``) saves as hyperparameters, so PPO's code reads every setting (Lightning, and its CLI,
    would record only the subclass's own arguments)."""
    names = [name for name in inspect.signature(PPO.__init__).parameters if name != "self"]
    return {name: frame.f_locals[name] for name in names}


def lr_fraction(env_steps: int, total_env_steps: int, start: float = 0.0) -> float:
    """The fraction of ``lr`` that ``anneal_lr`` applies after ``env_steps`` of ``total_env_steps``: 1 until
    ``start × total``, then linear to 0 at ``total`` (and 0 past it)."""
    progress = min(env_steps, total_env_steps) / total_env_steps
    return 1.0 if progress <= start else (1.0 - progress) / (1.0 - start)
