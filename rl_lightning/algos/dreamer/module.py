"""DreamerV3 (Hafner et al. 2023; 2024/Nature revision) as a LightningModule."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning import keys
from rl_lightning.algos.base import Policy, RLModule
from rl_lightning.algos.cuda_stream_weight_sync import CUDAStreamWeightSync
from rl_lightning.algos.dreamer.behavior import ActorCritic
from rl_lightning.algos.dreamer.config import check_dreamer_hparams
from rl_lightning.algos.dreamer.draws import GradientStepDraws
from rl_lightning.algos.dreamer.optim import LaProp
from rl_lightning.algos.dreamer.player import DreamerPlayer
from rl_lightning.algos.dreamer.policy import ActionSpace
from rl_lightning.algos.dreamer.update_graphs import UpdateGraphs
from rl_lightning.algos.dreamer.world_model import WorldModel
from rl_lightning.algos.histograms import dreamer_histograms
from rl_lightning.algos.soft_target_update import SoftTargetUpdate
from rl_lightning.data.timing import PhaseTimer
from rl_lightning.envs.base import BatchedEnv, EnvSpec, require_action_kind
from rl_lightning.errors import ConfigError, require_torch_compile
from rl_lightning.networks.dreamer_nets import dreamer_size

#: One-hot (Discrete) or bounded-normal (Box) actions, as the official code; multi-part actions are refused.
DREAMER_ACTIONS = ("discrete", "box")
#: loss term → the hyper-parameter holding its scale (I17: loss keys == scale keys).
LOSS_SCALES = {
    "rec": "rec_scale", "rew": "rew_scale", "con": "con_scale", "dyn": "dyn_scale", "rep": "rep_scale",
    "policy": "policy_scale", "value": "value_scale", "repval": "repval_scale",
}  # fmt: skip


class DreamerV3(RLModule):
    """World model + imagination actor-critic, one optimiser over the summed loss (the 2024 recipe).

    Each ``training_step`` pulls one ``DreamerUpdate`` from ``DreamerDataModule`` (the actor window is already in
    replay) and takes one gradient step per sampled ``[T, B]`` batch: the world-model loss on the batch, then
    imagination from every posterior state for ``horizon`` steps and the actor/critic losses (dreamer.md §3, §5).
    The slow critic follows the critic through ``SoftTargetUpdate(tau)``, attached by ``configure_callbacks``.
    Defaults follow the 2024 code; the 2023 choices are one field away (``dyn_scale=0.5``, ``norm="layer"``,
    ``initial="learned"``, ``twohot_space="symlog"``, ``discount_continue=False``, ``repval_scale=0``,
    ``optimizer="adam"``, ``policy_outscale=1``).

    Args:
        env_spec: linked from ``data.env_spec`` by the CLI.
        size: network preset by name: ``tiny``, ``XS``, ``S``, ``M`` (2023-style) or ``1M``, ``12M``, ``25M`` (2024).
        optimizer: ``laprop`` (2024: AGC + LaProp, one chain) or ``adam`` (global-norm clip ``max_grad_norm``).
        lr: learning rate.
        eps: optimiser epsilon (1e-20 for LaProp; use ~1e-8 for Adam).
        warmup_steps: linear learning-rate warmup in gradient steps (LaProp).
        agc: adaptive gradient clip ratio (LaProp; 0 disables).
        max_grad_norm: global gradient-norm clip (Adam).
        horizon: imagination horizon H.
        discount_horizon: effective horizon of the discount γ = 1 − 1/discount_horizon.
        discount_continue: fold γ into the continue target and use disc = 1 in imagination (2024 ``contdisc``).
        lam: λ of the λ-returns.
        free_nats: free bits, applied to the KL summed over the latents.
        rec_scale: weight of the reconstruction loss.
        rew_scale: weight of the reward loss.
        con_scale: weight of the continue loss.
        dyn_scale: weight of KL[sg(post) ‖ prior] (1.0 in 2024, 0.5 in 2023).
        rep_scale: weight of KL[post ‖ sg(prior)].
        policy_scale: weight of the actor loss.
        value_scale: weight of the critic loss.
        repval_scale: weight of the 2024 replay value loss (0 disables).
        slowreg: weight of the critic's regulariser towards the slow critic.
        entropy_coef: policy entropy bonus η.
        tau: slow-critic EMA rate per gradient step.
        unimix: uniform mix of latent and policy categoricals.
        bins: two-hot bins of the reward and value heads.
        twohot_space: ``raw`` (2024 symexp bins) or ``symlog`` (2023).
        initial: RSSM initial state, ``zeros`` (2024) or ``learned`` (2023).
        norm: ``rms`` (2024) or ``layer`` (2023).
        policy_outscale: actor output-layer scale.
        retnorm_decay: EMA decay of the return percentiles.
        retnorm_limit: smallest return scale.
        eval_deterministic: evaluate with the policy's mode (and latent modes) instead of samples.
        compile_update: run the gradient step's losses as ``torch.compile``d regions (``update_graphs.py``: the
            observe scan's step, the world-model terms, the imagination step, the actor-critic losses; their
            backward compiles with them), each compiled once per run on the first gradient step. Off by default:
            benchmarks/NOTES.md has the measured speed-up and compile time. Same draws as eager, so the two
            agree within float tolerance.
        histograms_every_n_updates: every this many updates, write TensorBoard histograms of the last gradient
            step's imagined λ-returns, critic values and actor advantages (the ``Histograms`` callback); ``None``
            (default): none.
    """

    family = "dreamer"
    supports_actor_processes = True  # actors act with their own player; the learner trains on the windows

    def __init__(
        self,
        env_spec: EnvSpec | None = None,
        size: str = "S",
        optimizer: str = "laprop",
        lr: float = 4e-5,
        eps: float = 1e-20,
        warmup_steps: int = 1000,
        agc: float = 0.3,
        max_grad_norm: float = 1000.0,
        horizon: int = 15,
        discount_horizon: float = 333.0,
        discount_continue: bool = True,
        lam: float = 0.95,
        free_nats: float = 1.0,
        rec_scale: float = 1.0,
        rew_scale: float = 1.0,
        con_scale: float = 1.0,
        dyn_scale: float = 1.0,
        rep_scale: float = 0.1,
        policy_scale: float = 1.0,
        value_scale: float = 1.0,
        repval_scale: float = 0.3,
        slowreg: float = 1.0,
        entropy_coef: float = 3e-4,
        tau: float = 0.02,
        unimix: float = 0.01,
        bins: int = 255,
        twohot_space: str = "raw",
        initial: str = "zeros",
        norm: str = "rms",
        policy_outscale: float = 0.01,
        retnorm_decay: float = 0.99,
        retnorm_limit: float = 1.0,
        eval_deterministic: bool = True,
        compile_update: bool = False,
        histograms_every_n_updates: int | None = None,
    ) -> None:
        super().__init__(env_spec)
        self.save_hyperparameters()
        check_dreamer_hparams(self.hparams)
        spec = self.env_spec
        check_dreamer_env(spec)
        preset = dreamer_size(size)
        self.space = ActionSpace(spec, unimix=unimix)
        self.world_model = WorldModel(
            spec,
            self.space.dim,
            preset,
            unimix,
            initial,
            norm,
            bins,
            twohot_space,
            continuous_actions=not spec.discrete,
        )
        self.behaviour = ActorCritic(
            self.world_model.rssm.feature_dim, self.space, preset, norm, bins, twohot_space, policy_outscale,
            retnorm_decay, retnorm_limit,
        )  # fmt: skip
        self.eval_deterministic = eval_deterministic
        self._init_actor_copy()
        self.sample_generator: torch.Generator | None = None
        self.last_learner_ms: float | None = None
        self._learner_timer: PhaseTimer | None = None
        self.last_metrics: dict[str, Any] = {}
        if compile_update:
            require_torch_compile("model.compile_update")
        self.update_graphs = UpdateGraphs(compile_update)

    def _init_actor_copy(self) -> None:
        """No actor copy yet: the player aliases the learner's networks until ``CUDAStreamWeightSync`` hands one off."""
        #: the actor's copy of the acting networks (``CUDAStreamWeightSync``); ``None`` = alias the learner's.
        self.actor_networks: nn.ModuleDict | None = None
        self.actor_version = 0
        #: CUDA event after which ``actor_networks`` holds version ``actor_version``; a stream reading the actor
        #: copy waits on it first. ``None`` on CPU (aliased weights) and before the first hand-off.
        self.policy_ready_event: Any = None

    # ----- acting -------------------------------------------------------------------------------------------
    def acting_networks(self) -> nn.ModuleDict:
        """The learner's modules the player needs (what ``CUDAStreamWeightSync`` copies)."""
        return nn.ModuleDict({"world_model": self.world_model, "actor": self.behaviour.actor})

    def player(self, num_envs: int, device: torch.device, deterministic: bool = False) -> DreamerPlayer:
        """A player over the actor copy if one exists, else over the learner's own modules (aliased)."""
        networks = self.actor_networks if self.actor_networks is not None else self.acting_networks()
        return DreamerPlayer(networks, self.space, num_envs, device, deterministic)

    def acting_policy(self, env: BatchedEnv, deterministic: bool = False, training: bool = True) -> Policy:
        return self.player(env.num_envs, env.device, deterministic)

    @torch.no_grad()
    def act(self, td: TensorDict, generator: torch.Generator | None = None, deterministic: bool = False) -> TensorDict:
        """One step from fresh episodes (every row treated as ``is_first``); players carry state, use them."""
        view = td.clone(recurse=False)
        view[keys.IS_FIRST] = torch.ones(td.batch_size, dtype=torch.bool, device=td.device)
        gen = generator if generator is not None else self.generator
        return self.player(td.batch_size[0], td.device, deterministic)(view, gen)

    # ----- learning -----------------------------------------------------------------------------------------
    def target_networks(self) -> list[tuple[nn.Module, nn.Module]]:
        """(critic, slow critic): moved by ``SoftTargetUpdate(tau)`` after every gradient step."""
        return [(self.behaviour.critic, self.behaviour.slow_critic)]

    def configure_callbacks(self) -> list[Any]:
        return [*super().configure_callbacks(), SoftTargetUpdate(tau=self.hparams.tau), CUDAStreamWeightSync()]

    @torch.no_grad()
    def histogram_tensors(self) -> dict[str, torch.Tensor]:
        """The last gradient step's imagined returns, values and advantages."""
        return dreamer_histograms(self.histogram_source)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        params = [p for p in self.parameters() if p.requires_grad]
        if hp.optimizer == "laprop":
            return LaProp(params, lr=hp.lr, eps=hp.eps, agc=hp.agc, warmup_steps=hp.warmup_steps)
        return torch.optim.Adam(params, lr=hp.lr, eps=hp.eps, fused=self.device.type in ("cpu", "cuda"))

    def _generator(self) -> torch.Generator:
        """The sampling generator on the module's device, seeded from the module's base generator once."""
        if self.sample_generator is None or self.sample_generator.device != self.device:
            seed = int(torch.randint(0, 2**62, (), generator=self.generator))
            self.sample_generator = torch.Generator(device=self.device).manual_seed(seed)
        return self.sample_generator

    def actor_policy_version(self) -> int:
        """Version of the weights the actor acts with (the learner's own when aliased)."""
        return self.actor_version if self.actor_networks is not None else self.policy_version

    def training_step(self, dataloader_iter: Iterator[Any]) -> None:
        update, _, _ = next(dataloader_iter)
        terms = None
        if update.batches is not None:
            if self._learner_timer is None:
                self._learner_timer = PhaseTimer(self.device)
            self._learner_timer.start()
            lag = self.policy_version - update.batches[keys.POLICY_VERSION].float().mean()
            terms = self.update(update.batches, self.optimizers())
            terms["lag"] = lag
            self.mark_update()
            self._learner_timer.stop()
        if self._learner_timer is not None and self._learner_timer.poll() is not None:
            self.last_learner_ms = self._learner_timer.last_ms
            update.stats["perf/learner_ms"] = torch.tensor(self.last_learner_ms)
        self._log_update(update.stats, terms)

    def update(self, batches: TensorDict, optimizer: Any) -> TensorDict:
        """One update: a gradient step per ``[T, B]`` batch of ``batches`` ``[G, T, B]``; returns mean terms."""
        return self.step_each(batches, optimizer)

    def _gradient_step(self, seq: TensorDict, optimizer: Any) -> TensorDict:
        terms = self.losses(seq)
        hp = self.hparams
        loss = sum(hp[LOSS_SCALES[k[5:]]] * v for k, v in terms.items() if k.startswith("loss_"))
        optimizer.zero_grad(set_to_none=True)
        self.backward_loss(loss)
        if hp.optimizer == "adam":
            params = [p for group in optimizer.param_groups for p in group["params"]]
            terms["grad_norm"] = torch.nn.utils.clip_grad_norm_(params, hp.max_grad_norm)
        optimizer.step()
        return TensorDict({k: v.detach() for k, v in terms.items()}, batch_size=[])

    def losses(self, seq: TensorDict) -> dict[str, torch.Tensor]:
        """Every loss term (means of per-step ``[T, B]``/``[H, N]`` terms) and diagnostics on one batch."""
        length, batch = seq.batch_size
        rssm = self.world_model.rssm
        draws = GradientStepDraws.draw(
            self._generator(), length, batch, self.hparams.horizon, rssm, self.space, self.device
        )
        per_step, diagnostics = self.update_graphs.losses(self, seq, draws, self._gather)
        out = {f"loss_{k}": v.mean() for k, v in per_step.items()}
        out.update(diagnostics)
        return out

    def _gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """All-gather over ranks for the return percentiles (identity on one process).

        A plain collective: the returns carry no gradient, and Lightning's ``all_gather`` goes through the deprecated
        autograd-aware ``torch.distributed.nn.functional.all_gather`` (a warning on every DDP run)."""
        if self._trainer is None or self.trainer.world_size == 1 or not torch.distributed.is_initialized():
            return tensor
        tensor = tensor.detach().contiguous()
        parts = [torch.empty_like(tensor) for _ in range(torch.distributed.get_world_size())]
        torch.distributed.all_gather(parts, tensor)
        return torch.cat([part.flatten() for part in parts])

    def _log_update(self, stats: dict[str, torch.Tensor], terms: TensorDict | None) -> None:
        metrics: dict[str, Any] = dict(stats)
        metrics["policy/learner_version"] = float(self.policy_version)
        metrics["policy/actor_version"] = float(self.actor_policy_version())
        if terms is not None:
            for key, value in terms.items():
                if key == "lag":
                    metrics["policy/lag"] = value
                elif key.startswith("wm_"):
                    metrics[f"world_model/{key[3:]}"] = value
                else:
                    metrics[f"train/{key}"] = value
            pred = terms["loss_rec"] + terms["loss_rew"] + terms["loss_con"]
            metrics["train/loss_pred"] = pred
        self.log_update(metrics)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        if self.sample_generator is not None:
            checkpoint["rl_counters"]["sample_generator"] = self.sample_generator.get_state()
            checkpoint["rl_counters"]["sample_generator_device"] = str(self.sample_generator.device)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        counters = checkpoint["rl_counters"]
        if "sample_generator" in counters:
            self.sample_generator = torch.Generator(device=counters["sample_generator_device"])
            self.sample_generator.set_state(counters["sample_generator"])


def check_dreamer_env(spec: EnvSpec) -> None:
    """Refuse, in one line, an env DreamerV3 cannot act in: actions other than ``Discrete``/``Box``, or masked ones."""
    require_action_kind(spec, "DreamerV3", DREAMER_ACTIONS)
    if spec.has_action_mask:
        raise ConfigError(f"DreamerV3 does not support action masks (env {spec.name}); use PPO or SPO for it")
