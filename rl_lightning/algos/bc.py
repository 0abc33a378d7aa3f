"""Behaviour cloning: PPO's own policy network trained by masked cross-entropy on recorded decisions.

``BC`` is a ``PPO`` module (same encoder, actor, critic and observation normaliser, built by PPO's code for the
env) whose training step is supervised: so a BC checkpoint's weights load into PPO unchanged
(``model.init_args.init_weights``, ``rl_lightning/algos/init_weights.py``) and PPO self-play starts from the
cloned policy. The critic is left as initialised (nothing to regress it on from a bot's actions alone).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from rl_lightning import keys
from rl_lightning.algos.ppo import PPO, ppo_arguments
from rl_lightning.envs.base import EnvSpec
from rl_lightning.errors import ConfigError
from rl_lightning.networks import distributions as D
from rl_lightning.reporting.env_step_log import finite_only, log_at_env_step, publish_to_callbacks, to_floats

SAMPLES_KEY = "bc_samples"


def masked_cross_entropy(
    logits: torch.Tensor, mask: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, accuracy)`` of logits ``[N, A]`` against the taken actions ``[N]``, illegal actions (``mask``
    False) removed from the softmax: the loss is the mean of ``-log p(action | legal actions)`` and the accuracy
    the share of rows whose most likely legal action is the taken one."""
    masked = D.masked_logits(logits, mask)
    nll = -torch.log_softmax(masked, -1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
    return nll.mean(), (masked.argmax(-1) == action).float().mean()


class BC(PPO):
    """Behaviour cloning of recorded (observation, action mask, action) rows (``BCDataModule``) into PPO's actor.

    Logs ``train/loss_bc`` and ``train/accuracy`` per gradient step and ``val/loss_bc``, ``val/accuracy`` on the
    held-out games after each epoch, all against ``samples`` (training rows seen). The run ends on
    ``trainer.max_epochs``; checkpoints come from Lightning's ``ModelCheckpoint`` (``configs/bc_hearts.yaml``).

    Args:
        env_spec: linked from ``data.env_spec`` by the CLI.
        hidden_sizes, activation, encoder, share_encoder, ortho_init: PPO's network settings; use the values the
            PPO run that starts from these weights will use.
        lr: Adam learning rate.
        adam_eps: Adam epsilon.
        max_grad_norm: global gradient-norm clip (0 disables clipping).
        normalize_obs: fit PPO's observation normaliser to the training rows before the first step (its statistics
            travel with the weights into PPO, which must then set ``normalize_obs`` too).
        norm_clip_obs: bound on normalised observations.
    """

    family = "bc"
    supports_actor_processes = False  # nothing to collect: BC reads recorded rows (PPO's True is not inherited)

    def __init__(
        self,
        env_spec: EnvSpec | None = None,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: str = "tanh",
        encoder: str | dict[str, str] = "mlp",
        share_encoder: bool = True,
        lr: float = 1e-3,
        adam_eps: float = 1e-5,
        max_grad_norm: float = 1.0,
        normalize_obs: bool = False,
        norm_clip_obs: float = 10.0,
        ortho_init: bool = True,
    ) -> None:
        super().__init__(env_spec, hidden_sizes=hidden_sizes, activation=activation, encoder=encoder,
                         share_encoder=share_encoder, lr=lr, adam_eps=adam_eps, max_grad_norm=max_grad_norm,
                         normalize_obs=normalize_obs, norm_clip_obs=norm_clip_obs, ortho_init=ortho_init)  # fmt: skip
        if self.env_spec.action_kind != "discrete" or not self.env_spec.has_action_mask:
            raise ConfigError(f"BC clones masked discrete decisions, but {self.env_spec.name} has "
                              f"{self.env_spec.action_kind} actions without masks; use a game env")  # fmt: skip
        self.samples = 0
        self._val_sums: torch.Tensor | None = None

    def save_hyperparameters(self, *args: Any, **kwargs: Any) -> None:
        """PPO's ``__init__`` calls this: save PPO's whole argument set, as BC passed it (Lightning reads each
        ``__init__`` frame through the most derived class's signature, which would drop PPO's own settings)."""
        super().save_hyperparameters(ppo_arguments(inspect.currentframe().f_back))  # the frame of PPO.__init__

    def check_config(self, datamodule: Any) -> None:
        """No rollout arithmetic: BC reads recorded rows."""

    def policy_logits(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's logits (before masking) for raw observations: what PPO's policy samples from."""
        return self.actor(self.encoder(obs if self.obs_normalizer is None else self.obs_normalizer(obs)))

    def on_fit_start(self) -> None:
        if self.obs_normalizer is not None and self.updates == 0:  # a resumed run keeps its restored statistics
            obs = self.trainer.datamodule.train_rows.columns[keys.OBS]
            for start in range(0, len(obs), 4096):
                self.obs_normalizer.update(obs[start : start + 4096].to(self.device, self.env_spec.obs_dtype))

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        optimizer = self.optimizers()
        loss, accuracy = masked_cross_entropy(
            self.policy_logits(batch[keys.OBS]), batch[keys.ACTION_MASK], batch[keys.ACTION]
        )
        optimizer.zero_grad()
        self.manual_backward(loss)
        max_norm = self.hparams.max_grad_norm if self.hparams.max_grad_norm > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm, foreach=True)
        optimizer.step()
        self.mark_update()
        self.samples += len(batch[keys.ACTION]) * self.trainer.world_size
        self._log({"train/loss_bc": loss.detach(), "train/accuracy": accuracy, "train/grad_norm": grad_norm})

    def on_validation_epoch_start(self) -> None:
        self._val_sums = torch.zeros(3, device=self.device)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        loss, accuracy = masked_cross_entropy(
            self.policy_logits(batch[keys.OBS]), batch[keys.ACTION_MASK], batch[keys.ACTION]
        )
        rows = len(batch[keys.ACTION])
        self._val_sums += torch.stack([loss * rows, accuracy * rows, torch.tensor(float(rows), device=self.device)])

    def on_validation_epoch_end(self) -> None:
        sums = self.trainer.strategy.reduce(self._val_sums, reduce_op="sum")
        self._log({"val/loss_bc": sums[0] / sums[2], "val/accuracy": sums[1] / sums[2]})

    def _log(self, metrics: dict[str, Any]) -> None:
        """One point per metric at ``samples`` (training rows seen), to the loggers and the callbacks' monitors."""
        scalars = finite_only(to_floats({**metrics, "samples": float(self.samples), "updates": float(self.updates)}))
        self.last_metrics = scalars
        publish_to_callbacks(self.trainer, scalars)
        log_at_env_step(self.trainer, scalars, self.samples)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint[SAMPLES_KEY] = self.samples

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self.samples = int(checkpoint.get(SAMPLES_KEY, 0))
