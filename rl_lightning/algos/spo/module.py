"""SPO (Macfarlane et al., NeurIPS 2024) as a LightningModule: SMC-search acting, one ``training_step`` per update."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning import keys
from rl_lightning.algos.base import Policy, RLModule
from rl_lightning.algos.histograms import histograms_check
from rl_lightning.algos.soft_target_update import SoftTargetUpdate
from rl_lightning.algos.spo.compiled_search import CompiledSearch, check_compilable
from rl_lightning.algos.spo.histograms import spo_histograms
from rl_lightning.algos.spo.losses import SPOLosses
from rl_lightning.algos.spo.prior import ActorCriticPrior
from rl_lightning.algos.spo.search import SearchConfig, smc_search
from rl_lightning.algos.spo.seats import check_search_game, check_searchable, strip_carried
from rl_lightning.envs.base import BatchedEnv, EnvSpec, require_action_kind
from rl_lightning.envs.gymnasium.backend import no_snapshot
from rl_lightning.errors import ConfigError, check_fields
from rl_lightning.networks.encoders import ObsEncoder
from rl_lightning.networks.mlp import flat_size, mlp
from rl_lightning.networks.normalizers import observation_normalizer
from rl_lightning.objectives import spo as L

#: SPO's search target and losses are written for one categorical or one tanh-Normal action (spo.md §1.5).
SPO_ACTIONS = ("discrete", "box")
SEARCH_ESS = "search_ess"  # [depth] per row: diagnostics, logged and stripped before replay
SEARCH_ALIVE = "search_alive"


class SPO(SPOLosses, RLModule):
    """Sequential Monte Carlo Policy Optimisation with actor and critic networks and their Polyak targets.

    Acting runs SMC search (``algos/spo/search.py``) from the real envs' states with the online networks and
    executes an action drawn from the search target q̂; each row stored in replay keeps the N root actions, their
    weights and advantages. Each ``training_step`` pulls one ``ReplayUpdate`` (rollout already collected and
    stored) and takes one gradient step per sampled batch on ``L_π + L_KL + L_α + L_η + L_V`` (spo.md §1.5), with
    one Adam over three parameter groups (actor, critic, duals: separate learning rates and separately clipped
    gradient norms, equivalent to Stoix's separate optimisers). ``SoftTargetUpdate(tau)`` is attached by
    ``configure_callbacks`` and moves both targets after every gradient step. Discrete actions use a masked
    categorical policy; box actions a tanh-squashed Normal with decoupled mean/std KL duals per dimension;
    ``MultiDiscrete``/``MultiBinary`` actions are refused. Observations (any dtype, ``Discrete``, ``Dict``) go
    through an ``ObsEncoder`` (one encoder per key: a CNN per image key when ``encoder`` names one) before the actor
    and critic MLPs; the targets copy the encoders with the MLPs, and ``SoftTargetUpdate`` moves them together.
    The loss terms of one batch are ``SPOLosses.losses`` (``algos/spo/losses.py``).

    Args:
        env_spec: linked from ``data.env_spec`` by the CLI.
        hidden_sizes: hidden layer widths of actor and critic (after the encoder).
        activation: ``tanh``, ``relu``, ``elu`` or ``silu``.
        encoder: ``mlp`` (flatten every key; images scaled /255), ``nature`` or ``impala`` (that CNN for every
            rank-3 ``uint8`` image key, vector keys flattened beside it), or ``{key: choice}`` per observation key
            (``"/"``-joined nested keys, ``obs`` for a single array). Nature needs images >= 36×36.
        share_encoder: one encoder feeds actor and critic (trained by both losses, in the critic's optimiser
            group); ``False`` (Stoix's separate torsos) gives each its own, in its own group. Only matters for a
            CNN: ``mlp`` encoders have no parameters.
        actor_lr: actor learning rate.
        critic_lr: critic learning rate.
        dual_lr: learning rate of the temperature and KL duals.
        adam_eps: Adam epsilon.
        max_grad_norm: gradient-norm clip applied to each group (actor, critic, duals) separately; 0 disables.
        gamma: discount of the critic's GAE(λ) targets.
        gae_lambda: λ of those targets.
        vf_coef: critic loss weight.
        tau: Polyak coefficient of the target actor (the KL anchor) and target critic, per gradient step.
        num_particles: particles N per env.
        search_depth: SMC depth h.
        resample_mode: ``period`` or ``ess``.
        resample_period: steps between resamples (``period`` mode).
        ess_threshold: resample an env when ESS < this · N (``ess`` mode).
        search_gamma: discount inside the search (1.0 as published; see spo.md §1.3 before changing it).
        search_gae_lambda: λ of the per-particle search advantages.
        dirichlet_alpha: root Dirichlet concentration (discrete).
        root_noise_fraction: root exploration mix when acting for training (0 = off, as in Stoix).
        search_precision: ``float32`` or ``bfloat16``: the search's actor and critic forwards under a bfloat16
            autocast (float32 accumulation and outputs; weights, resampling and training stay float32). About
            2.5× the search's particle-steps/s on a CPU with AVX512-BF16 (``benchmarks/NOTES.md``, SPO).
        compile_search: run each search as one ``torch.compile`` graph over noise drawn before it
            (``algos/spo/compiled_search.py``; the package's torch envs only). Same distributions as the default
            search from another random stream; the first search of each shape compiles (10-25 s on a CPU).
        adaptive_temperature: learn η from its dual; ``False`` uses ``fixed_temperature``.
        fixed_temperature: η when not adaptive (e.g. 1e9 makes the target the prior: a negative control).
        init_log_temperature: initial log-η parameter (η = softplus(·), so 3.0 means η ≈ 3.05).
        epsilon: E-step KL bound ε of the temperature dual.
        init_log_alpha: initial log-α of the KL trust region (discrete).
        epsilon_alpha: KL bound of the trust region (discrete).
        init_log_alpha_mean: initial log-α_μ per action dimension (continuous).
        init_log_alpha_std: initial log-α_Σ per action dimension (continuous).
        epsilon_alpha_mean: KL bound of the mean part per dimension (continuous).
        epsilon_alpha_std: KL bound of the std part per dimension (continuous).
        eval_greedy: evaluate with the target's greedy choice instead of a draw (published numbers sample).
        normalize_obs: feed every network (in search, acting and the losses) ``clip((obs - mean) / std,
            ±norm_clip_obs)`` with running statistics of the training observations; replay keeps raw
            observations. Each collected rollout enters the statistics before the update that follows it; search
            only reads them. Image observations (``uint8``, >= 3 dims) are left as they are. (No reward
            normalisation: the search's returns and the critic's targets would have to share one scale.)
        norm_clip_obs: bound on normalised observations.
        histograms_every_n_updates: every this many updates, write TensorBoard histograms of the last rollout's
            search weights (the target q̂), particle advantages and root values, the prior's logits (or pre-tanh
            means and log-std) and the normaliser statistics (the ``Histograms`` callback); ``None`` (default): none.
    """

    family = "spo"
    supports_actor_processes = True  # the search runs on the actor's own envs (snapshots of its states)

    def __init__(
        self,
        env_spec: EnvSpec | None = None,
        hidden_sizes: tuple[int, ...] = (256, 256),
        activation: str = "relu",
        encoder: str | dict[str, str] = "mlp",
        share_encoder: bool = False,
        actor_lr: float = 3e-4,
        critic_lr: float = 3e-4,
        dual_lr: float = 1e-3,
        adam_eps: float = 1e-5,
        max_grad_norm: float = 0.5,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        vf_coef: float = 1.0,
        tau: float = 0.005,
        num_particles: int = 16,
        search_depth: int = 4,
        resample_mode: str = "period",
        resample_period: int = 4,
        ess_threshold: float = 0.5,
        search_gamma: float = 1.0,
        search_gae_lambda: float = 1.0,
        dirichlet_alpha: float = 0.03,
        root_noise_fraction: float = 0.0,
        search_precision: str = "float32",
        compile_search: bool = False,
        adaptive_temperature: bool = True,
        fixed_temperature: float = 0.5,
        init_log_temperature: float = 3.0,
        epsilon: float = 0.5,
        init_log_alpha: float = 3.0,
        epsilon_alpha: float = 1e-3,
        init_log_alpha_mean: float = 10.0,
        init_log_alpha_std: float = 500.0,
        epsilon_alpha_mean: float = 0.05,
        epsilon_alpha_std: float = 5e-4,
        eval_greedy: bool = False,
        normalize_obs: bool = False,
        norm_clip_obs: float = 10.0,
        histograms_every_n_updates: int | None = None,
    ) -> None:
        super().__init__(env_spec)
        self.save_hyperparameters()
        hp = self.hparams
        self.search_config = SearchConfig(
            num_particles, search_depth, resample_mode, resample_period, ess_threshold,
            search_gamma, search_gae_lambda, dirichlet_alpha, root_noise_fraction, search_precision,
        )  # fmt: skip
        self.search_config.check()
        _check_hparams(hp)
        spec = self.env_spec
        require_action_kind(spec, "SPO", SPO_ACTIONS)
        check_searchable(spec)  # games: never search the true state of an imperfect-information game
        self._build_networks(encoder, share_encoder, hidden_sizes, activation)
        self._build_duals(
            adaptive_temperature, init_log_temperature, fixed_temperature,
            init_log_alpha, init_log_alpha_mean, init_log_alpha_std,
        )  # fmt: skip
        self.obs_normalizer = observation_normalizer(spec, norm_clip_obs) if normalize_obs else None
        self.prior = ActorCriticPrior(
            self.actor, self.critic, spec, self.encoder, self.obs_normalizer, self.critic_encoder
        )
        self.eval_deterministic = bool(hp.eval_greedy)
        self._search = CompiledSearch() if compile_search else smc_search
        self._search_stats: dict[str, torch.Tensor] = {}
        self.last_metrics: dict[str, Any] = {}

    def _build_networks(
        self, encoder: str | dict[str, str], share_encoder: bool, hidden_sizes: tuple[int, ...], activation: str
    ) -> None:
        """The encoders, the actor and critic MLPs, and their Polyak targets (frozen copies)."""
        spec = self.env_spec
        self.encoder = ObsEncoder(spec, encoder)
        self.critic_encoder = None if share_encoder else ObsEncoder(spec, encoder)
        obs_dim = self.encoder.out_dim
        out_dim = spec.num_actions if spec.discrete else 2 * flat_size(spec.action_shape)
        self.actor = mlp(obs_dim, out_dim, hidden_sizes, activation, output_gain=0.01)
        self.critic = mlp(obs_dim, 1, hidden_sizes, activation, output_gain=1.0)
        self.target_actor = copy.deepcopy(self.actor).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_encoder = copy.deepcopy(self.encoder).requires_grad_(False)
        self.target_critic_encoder = (
            None if self.critic_encoder is None else copy.deepcopy(self.critic_encoder).requires_grad_(False)
        )

    def _build_duals(
        self,
        adaptive_temperature: bool,
        init_log_temperature: float,
        fixed_temperature: float,
        init_log_alpha: float,
        init_log_alpha_mean: float,
        init_log_alpha_std: float,
    ) -> None:
        """The temperature η (learned, or fixed and frozen) and the KL trust-region duals: one α (discrete), or α_μ
        and α_Σ per action dimension (continuous)."""
        spec = self.env_spec
        initial = init_log_temperature if adaptive_temperature else _inverse_softplus(fixed_temperature)
        self.log_temperature = nn.Parameter(torch.tensor(float(initial)), requires_grad=adaptive_temperature)
        if spec.discrete:
            self.log_alpha = nn.Parameter(torch.tensor(float(init_log_alpha)))
        else:
            dims = flat_size(spec.action_shape)
            self.log_alpha_mean = nn.Parameter(torch.full((dims,), float(init_log_alpha_mean)))
            self.log_alpha_std = nn.Parameter(torch.full((dims,), float(init_log_alpha_std)))

    # ----- acting -------------------------------------------------------------------------------------------
    def search_temperature(self) -> torch.Tensor:
        """η the search reads: the learned dual (adaptive) or ``fixed_temperature``."""
        if self.hparams.adaptive_temperature:
            return L.dual_value(self.log_temperature.detach())
        return self.log_temperature.detach().new_full((), float(self.hparams.fixed_temperature))  # no host copy

    @torch.no_grad()
    def act(self, td: TensorDict, generator: torch.Generator | None = None, deterministic: bool = False) -> TensorDict:
        """The raw prior π_θ, without search (for diagnostics; the collector and evaluator use ``acting_policy``)."""
        params = self.prior.params(td)
        action = self.prior.mode(params) if deterministic else self.prior.sample(params, generator)
        return TensorDict({keys.ACTION: action}, batch_size=td.batch_size, device=td.device)

    def acting_policy(self, env: BatchedEnv, deterministic: bool = False, training: bool = True) -> Policy:
        """SMC search from ``env``'s current state; training adds root noise and records the search target."""

        def policy(obs: TensorDict, generator: torch.Generator) -> TensorDict:
            assert env.state is not None, "acting_policy needs a reset env"
            result = self._search(
                env.env, env.state, obs, self.prior, self.search_config, self.search_temperature(), generator,
                explore=training, greedy=deterministic,
            )  # fmt: skip
            out = {keys.ACTION: result.action}
            if training:
                out.update({
                    keys.SAMPLED_ACTIONS: result.sampled_actions,
                    keys.SAMPLED_WEIGHTS: result.weights,
                    keys.SAMPLED_ADVANTAGES: result.advantages,
                    keys.SEARCH_VALUE: result.root_value,
                    SEARCH_ESS: result.ess.transpose(0, 1),
                    SEARCH_ALIVE: result.alive.transpose(0, 1),
                })  # fmt: skip
            return TensorDict(out, batch_size=obs.batch_size, device=obs.device)

        return policy

    @torch.no_grad()
    def process_rollout(self, batch: TensorDict) -> TensorDict:
        """Take the search diagnostics out of a fresh rollout (kept for logging, not stored in replay) and
        update the observation statistics from it."""
        if batch.numel() == 0:
            raise ConfigError("SPO received an empty rollout; data.rollout_length and data.num_envs must be >= 1")
        if self.env_spec.num_seats > 1:  # self-play: replay keeps the ticks, not the collector's carried rows
            batch = strip_carried(batch, self.env_spec.num_seats)
        ess, alive = batch.pop(SEARCH_ESS), batch.pop(SEARCH_ALIVE)
        if self.keep_histogram_source:  # the Histograms callback reads it after this step, then drops it
            self.histogram_source = batch
        if self.obs_normalizer is not None:  # training collection only: the replay keeps the raw observations
            self.obs_normalizer.update(batch[keys.OBS])
        stats: dict[str, torch.Tensor] = {}
        if ess.shape[-1] > 0:
            stats["search/ess"] = ess.mean()
            stats["search/ess_final"] = ess[..., -1].mean()
            stats["search/particles_alive"] = alive[..., -1].mean()
        if self.env_spec.discrete:  # entropy of the aggregated target q̂(a) = Σ_{i: a_i = a} w̄_i
            target = torch.zeros(*batch.batch_size, self.env_spec.num_actions, device=batch.device)
            target.scatter_add_(-1, batch[keys.SAMPLED_ACTIONS], batch[keys.SAMPLED_WEIGHTS])
            stats["search/target_entropy"] = -(target * target.clamp_min(1e-12).log()).sum(-1).mean()
        self._search_stats = stats
        return batch

    # ----- learning -----------------------------------------------------------------------------------------
    def target_networks(self) -> list[tuple[nn.Module, nn.Module]]:
        """(online, target) pairs moved by ``SoftTargetUpdate`` (encoders with parameters, i.e. CNNs, included)."""
        pairs = [(self.actor, self.target_actor), (self.critic, self.target_critic)]
        encoders = [(self.encoder, self.target_encoder), (self.critic_encoder, self.target_critic_encoder)]
        return pairs + [(online, target) for online, target in encoders if online is not None and _has_params(online)]

    def _encoder_groups(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """Encoder parameters of the actor's and the critic's optimiser groups (a shared encoder: the critic's)."""
        if self.critic_encoder is None:
            return [], list(self.encoder.parameters())
        return list(self.encoder.parameters()), list(self.critic_encoder.parameters())

    def dual_parameters(self) -> list[nn.Parameter]:
        duals = [self.log_temperature] if self.hparams.adaptive_temperature else []
        if self.env_spec.discrete:
            return [*duals, self.log_alpha]
        return [*duals, self.log_alpha_mean, self.log_alpha_std]

    def check_config(self, datamodule: Any) -> None:
        """SPO searches on snapshots of the env state: refuse, at start-up, a backend that cannot take them."""
        env = datamodule.env
        if self.hparams.compile_search:
            check_compilable(env)
        if not env.can_snapshot:
            raise ConfigError(f"data.env: SPO searches on env snapshots, and {no_snapshot(env)}")
        check_search_game(env)

    def configure_callbacks(self) -> list[Any]:
        return [*super().configure_callbacks(), SoftTargetUpdate(tau=self.hparams.tau)]

    @torch.no_grad()
    def histogram_tensors(self) -> dict[str, torch.Tensor]:
        """The last rollout's search results and the updated prior's outputs on its observations."""
        return spo_histograms(self, self.histogram_source)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        actor_encoder, critic_encoder = self._encoder_groups()
        groups = [
            {"params": [*self.actor.parameters(), *actor_encoder], "lr": hp.actor_lr, "name": "actor"},
            {"params": [*self.critic.parameters(), *critic_encoder], "lr": hp.critic_lr, "name": "critic"},
            {"params": self.dual_parameters(), "lr": hp.dual_lr, "name": "duals"},
        ]
        fused = self.device.type in ("cpu", "cuda")
        return torch.optim.Adam(groups, eps=hp.adam_eps, fused=fused)

    def training_step(self, dataloader_iter: Iterator[Any]) -> None:
        update, _, _ = next(dataloader_iter)
        terms = None
        if update.batches is not None:
            lag = self.policy_version - update.batches[keys.POLICY_VERSION].float().mean()
            terms = self.update(update.batches, self.optimizers())
            terms["lag"] = lag
            self.mark_update()
        self._log_update(update.stats, terms)

    def update(self, batches: TensorDict, optimizer: Any) -> TensorDict:
        """One update: a gradient step per ``[L, B]`` batch of ``batches`` ``[G, L, B]``; returns mean terms."""
        return self.step_each(batches, optimizer)

    def _gradient_step(self, seq: TensorDict, optimizer: Any) -> TensorDict:
        terms = self.losses(seq)
        loss = sum(v for k, v in terms.items() if k.startswith("loss_"))
        optimizer.zero_grad(set_to_none=True)
        self.backward_loss(loss)
        max_norm = self.hparams.max_grad_norm if self.hparams.max_grad_norm > 0 else float("inf")
        for group in optimizer.param_groups:
            terms[f"grad_norm_{group['name']}"] = torch.nn.utils.clip_grad_norm_(group["params"], max_norm)
        optimizer.step()
        L.clamp_duals_(self.dual_parameters())
        return terms.detach()

    def _log_update(self, stats: dict[str, torch.Tensor], terms: TensorDict | None) -> None:
        metrics: dict[str, Any] = dict(stats)
        metrics.update(self._search_stats)
        metrics["search/temperature"] = self.search_temperature()
        if terms is not None:
            for key, value in terms.items():
                if key in ("kl_nonparametric",):
                    metrics["search/kl_nonparametric"] = value
                    metrics["search/kl_nonparametric_relative"] = value / self.hparams.epsilon
                elif key.startswith("alpha"):
                    metrics[f"search/{key}"] = value
                elif key == "lag":
                    metrics["policy/lag"] = value
                elif key != "temperature":
                    metrics[f"train/{key}"] = value
        self.log_update(metrics)


def _inverse_softplus(value: float) -> float:
    """x with softplus(x) = value (so a fixed η is stored in the same parametrisation as the learned one)."""
    return value + math.log(-math.expm1(-value))


def _has_params(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def _check_hparams(hp: Any) -> None:
    checks = [
        ("actor_lr", hp.actor_lr > 0, "use a positive learning rate, e.g. 3e-4"),
        ("critic_lr", hp.critic_lr > 0, "use a positive learning rate, e.g. 3e-4"),
        ("dual_lr", hp.dual_lr > 0, "use a positive learning rate, e.g. 1e-3"),
        ("gamma", 0.0 <= hp.gamma <= 1.0, "use a discount in [0, 1]"),
        ("gae_lambda", 0.0 <= hp.gae_lambda <= 1.0, "use λ in [0, 1]"),
        ("tau", 0.0 < hp.tau <= 1.0, "use a Polyak coefficient in (0, 1], e.g. 0.005"),
        ("max_grad_norm", hp.max_grad_norm >= 0, "use 0 (off) or a positive norm"),
        ("fixed_temperature", hp.fixed_temperature > 0, "use a positive temperature"),
        ("epsilon", hp.epsilon > 0, "use a positive KL bound, e.g. 0.5"),
        ("epsilon_alpha", hp.epsilon_alpha > 0, "use a positive KL bound, e.g. 1e-3"),
        ("norm_clip_obs", hp.norm_clip_obs > 0, "use a positive bound, e.g. 10"),
        histograms_check(hp.histograms_every_n_updates),
    ]
    check_fields(checks, hp)
