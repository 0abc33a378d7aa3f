"""Recurrent PPO: an LSTM or GRU core between PPO's encoder and its heads, updated on whole env sequences."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos.histograms import policy_histograms, recurrent_actor_features
from rl_lightning.algos.ppo import PPO, TERM_NAMES
from rl_lightning.envs.base import BatchedEnv, EnvSpec
from rl_lightning.errors import ConfigError
from rl_lightning.networks.mlp import mlp
from rl_lightning.networks.recurrent import RecurrentCores

_KL_INDEX = TERM_NAMES.index("approx_kl")
_FLAT_KEYS = (keys.ACTION, keys.LOGPROB, keys.VALUE, keys.ADVANTAGE, keys.RETURN)
INITIAL_STATE = "initial_state"  # a minibatch's state at its first tick (before that tick's is_first reset)


class RecurrentPPO(PPO):
    """PPO whose actor and critic read the features of a recurrent core (LSTM or GRU) instead of one observation.

    ``encoder → core → heads``: the core carries a state per env across steps (``shared_core``: one core feeds
    both heads; else the critic has its own, as sb3-contrib's ``enable_critic_lstm``). Where an observation starts
    an episode (``is_first``) the state is zeroed before the core reads it.

    Collection: ``act`` reads the carried state from the row (``recurrent_state``; zeros where absent) and returns
    it with the state after the step (``next_recurrent_state``), which the collector carries into its live view
    of the envs. So every rollout row stores the state it was acted from, the rollout's first row holds each env's
    state at the start of the rollout, and the live view (checkpointed with torch envs' state) resumes open
    episodes with their state; under DDP each rank carries its own envs' states.

    Update: minibatches are groups of whole env sequences (``num_minibatches`` must divide ``num_envs``), each
    replayed from its stored state at the rollout's start with the same resets, so the log-probabilities and
    values of the update are exactly those of acting (truncated BPTT over the rollout, no padding, no chunk
    boundaries). Truncation bootstraps ``V(final_obs)`` with the state after the episode's last step (the state
    that saw it, before the reset); GAE is unchanged.

    Evaluation, ``rl-lightning validate``/``test`` and ``load_policy`` act through ``player``: a ``RecurrentPlayer``
    that carries each env's state between calls. Not supported (refused in one line): ``data.compile`` (the fused
    rollout), ``model.compile_update``, ``model.init_weights``, multi-seat games.

    Args:
        env_spec: linked from ``data.env_spec`` by the CLI.
        core: ``lstm`` or ``gru``.
        core_size: hidden width of the core (the heads' input width).
        shared_core: one core for actor and critic (``False``: a second core for the critic).
        hidden_sizes: hidden layers of the actor and critic heads after the core (``[]``: linear heads).
        **kwargs: every other ``PPO`` argument (``lr``, ``gamma``, ``num_minibatches``, ``normalize_obs``...).
    """

    family = "recurrent_ppo"

    def __init__(
        self,
        env_spec: EnvSpec | None = None,
        core: str = "lstm",
        core_size: int = 128,
        shared_core: bool = True,
        hidden_sizes: tuple[int, ...] = (64,),
        **kwargs: Any,
    ) -> None:
        if kwargs.get("compile_update"):
            raise ConfigError(
                "model.compile_update=true is not supported by RecurrentPPO (its update unrolls a core over time); "
                "set model.compile_update: false"
            )
        if kwargs.get("sde"):
            raise ConfigError(
                "model.sde=true is not supported by RecurrentPPO (gSDE's noise reads the actor's hidden features, "
                "which here follow the core); set model.sde: false"
            )
        if kwargs.get("init_weights"):  # PPO would load it into heads this class then replaces
            raise ConfigError(
                "model.init_weights is not supported by RecurrentPPO (its heads read the core, not the encoder); "
                "remove it, or resume a RecurrentPPO run with --ckpt_path"
            )
        if kwargs.get("critic_input", "obs") != "obs":  # the critic core reads the encoded observation
            raise ConfigError(
                "model.critic_input=critic_obs is not supported by RecurrentPPO (its critic reads its core's state); "
                "use PPO, or critic_input: obs"
            )
        for field in ("policy_table_rows", "value_table_rows"):  # tables key on the observation; heads read the core
            if kwargs.get(field):
                raise ConfigError(
                    f"model.{field} is not supported by RecurrentPPO (its heads read the core's state, not the "
                    f"observation the table is keyed on); set model.{field}: 0"
                )
        super().__init__(env_spec, hidden_sizes=hidden_sizes, **kwargs)
        spec = self.env_spec
        if spec.num_seats > 1:
            raise ConfigError(
                f"RecurrentPPO does not support multi-seat games ({spec.name} has {spec.num_seats} seats); use PPO"
            )
        hp = self.hparams
        critic_in = (self.encoder if self.critic_encoder is None else self.critic_encoder).out_dim
        self.cores = RecurrentCores(self.encoder.out_dim, critic_in, core, core_size, shared_core)
        ortho = hp.ortho_init
        self.actor = mlp(
            core_size, self.action_width, hidden_sizes, hp.activation, output_gain=0.01, orthogonal=ortho, float32=True
        )
        self.critic = mlp(core_size, 1, hidden_sizes, hp.activation, output_gain=1.0, orthogonal=ortho, float32=True)
        self._value_when_acting = True  # the critic's state is only right during the sequential pass
        self._rollout_shape: tuple[int, int] | None = None

    # ----- acting -------------------------------------------------------------------------------------------
    @property
    def acts_from_noise(self) -> bool:
        return False  # the fused rollout step has no carried state

    def _core_step(self, td: TensorDict) -> tuple[torch.Tensor, torch.Tensor, TensorDict, TensorDict]:
        """``(actor features, critic features, state read, state after)`` of one tick of ``td``'s rows."""
        n = td.batch_size[0]
        state = td.get(keys.RECURRENT_STATE, None)
        if state is None:
            state = self.cores.initial_state(n, td.device)
        is_first = td.get(keys.IS_FIRST, None)
        if is_first is None:
            is_first = torch.zeros(n, dtype=torch.bool, device=state.device)
        features, critic_features = self._features(td)
        out, critic_out, next_state = self.cores.step(features, critic_features, state, is_first)
        return out, critic_out, state, next_state

    @torch.no_grad()
    def act(self, td: TensorDict, generator: torch.Generator | None = None, deterministic: bool = False) -> TensorDict:
        """``PPO.act`` on the core's features; adds ``recurrent_state`` (read) and ``next_recurrent_state``."""
        out, critic_out, state, next_state = self._core_step(td)
        acted = self._act_on(td, out, critic_out, generator, deterministic)
        acted[keys.RECURRENT_STATE] = state
        acted[keys.NEXT_RECURRENT_STATE] = next_state
        return acted

    def player(self, num_envs: int, device: torch.device, deterministic: bool = False) -> RecurrentPlayer:
        """A policy carrying ``num_envs`` envs' states between calls (evaluation, ``load_policy``)."""
        return RecurrentPlayer(self, num_envs, device, deterministic)

    def acting_policy(self, env: BatchedEnv, deterministic: bool = False, training: bool = True) -> Any:
        # Training collection carries the state in the collector's live view (checkpointed); evaluation in a player.
        if training:
            return super().acting_policy(env, deterministic, training)
        return self.player(env.num_envs, env.device, deterministic)

    # ----- targets ------------------------------------------------------------------------------------------
    def _next_value(self, batch: TensorDict) -> torch.Tensor:
        """``V(final_obs)`` per step; at episode ends and the last tick the core steps from the state after the
        step (``next_recurrent_state``: the state that saw ``final_obs``), without a reset."""
        value = batch[keys.VALUE]
        outside = batch[keys.TERMINATED] | batch[keys.TRUNCATED]
        outside[-1] = True
        next_value = torch.cat([value[1:], value[-1:]])
        rows = batch.select(keys.FINAL_OBS, keys.NEXT_RECURRENT_STATE)[outside]  # one host sync per rollout
        n = rows.batch_size[0]
        view = TensorDict(
            {
                keys.OBS: rows[keys.FINAL_OBS],
                keys.RECURRENT_STATE: rows[keys.NEXT_RECURRENT_STATE],
                keys.IS_FIRST: torch.zeros(n, dtype=torch.bool, device=value.device),
            },
            [n],
        )
        _, critic_out, _, _ = self._core_step(view)
        next_value[outside] = self.critic(critic_out).squeeze(-1).to(next_value.dtype)
        return next_value

    # ----- learning -----------------------------------------------------------------------------------------
    def check_config(self, datamodule: Any) -> None:
        """Refuse the fused rollout; minibatches are groups of whole env sequences."""
        if getattr(datamodule, "compile", False):
            raise ConfigError(
                "data.compile=true (the fused rollout step) does not support RecurrentPPO, whose policy carries "
                "state across steps; set data.compile: false"
            )
        num_envs, n = int(datamodule.num_envs), self.hparams.num_minibatches
        if num_envs % n != 0:
            raise ConfigError(
                f"model.num_minibatches={n} does not divide data.num_envs={num_envs}: RecurrentPPO's minibatches are "
                f"groups of whole env sequences; choose a divisor of {num_envs}"
            )

    def training_step(self, dataloader_iter: Iterator[Any]) -> None:
        rollout, batch_idx, dataloader_idx = next(dataloader_iter)
        self._rollout_shape = tuple(rollout.batch.batch_size)  # PPO's step flattens the rollout; ``update`` unflattens
        return super().training_step(iter([(rollout, batch_idx, dataloader_idx)]))

    def update(self, batch: TensorDict, optimizer: Any) -> TensorDict:
        """One PPO update on a processed ``[T, B]`` rollout: ``update_epochs`` passes, each over the envs shuffled
        and split into ``num_minibatches`` groups whose whole sequences are replayed from the rollout's first row.
        A flattened rollout (``PPO.training_step``) is reshaped to the last rollout's ``[T, B]``."""
        hp = self.hparams
        if batch.batch_dims == 1:
            if self._rollout_shape is None:
                raise ValueError("RecurrentPPO.update needs a [num_steps, num_envs] rollout")
            batch = batch.reshape(self._rollout_shape)
        num_envs = batch.batch_size[1]
        if num_envs % hp.num_minibatches:
            raise ConfigError(f"model.num_minibatches={hp.num_minibatches} must divide the rollout's {num_envs} envs")
        group = num_envs // hp.num_minibatches
        sequences: dict[str, Any] = {keys.OBS: self._obs(batch), keys.IS_FIRST: batch[keys.IS_FIRST]}
        columns = {key: batch[key] for key in _FLAT_KEYS}
        if keys.ACTION_MASK in batch:
            columns[keys.ACTION_MASK] = batch[keys.ACTION_MASK]
        initial = batch[keys.RECURRENT_STATE][0]

        def epoch() -> Iterator[dict[str, Any]]:
            perm = torch.randperm(num_envs, generator=self.generator).to(batch.device)
            for start in range(0, num_envs, group):
                envs = perm[start : start + group]
                mb = {key: value[:, envs] for key, value in sequences.items()}
                mb.update({key: value[:, envs].flatten(0, 1) for key, value in columns.items()})
                mb[INITIAL_STATE] = initial[envs]
                yield mb

        return self.run_epochs(optimizer, epoch)

    def sequence_log_prob_entropy_value(
        self,
        obs: torch.Tensor | TensorDict,
        is_first: torch.Tensor,
        initial: TensorDict,
        action: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logprob, entropy, value)``, flat ``[T·B]``, of ``[T, B]`` sequences of (normalised) ``obs`` replayed
        through the core from ``initial`` (``[B]``) with resets at ``is_first``; ``action``/``mask`` flat."""
        steps, envs = is_first.shape
        flat_obs = obs.reshape(steps * envs) if isinstance(obs, TensorDict) else obs.flatten(0, 1)
        features = self.encoder(flat_obs)
        critic_features = features if self.critic_encoder is None else self.critic_encoder(flat_obs)
        out, critic_out = self.cores.unroll(
            features.reshape(steps, envs, -1), critic_features.reshape(steps, envs, -1), initial, is_first
        )
        return self._heads_log_prob_entropy_value(out.flatten(0, 1), critic_out.flatten(0, 1), action, mask)

    def _evaluate_minibatch(self, mb: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.sequence_log_prob_entropy_value(
            mb[keys.OBS], mb[keys.IS_FIRST], mb[INITIAL_STATE], mb[keys.ACTION], mb.get(keys.ACTION_MASK)
        )

    @torch.no_grad()
    def histogram_tensors(self) -> dict[str, torch.Tensor]:
        """As ``PPO``'s, the policy's outputs replayed through the core over the rollout's sequences."""
        batch = self.histogram_source
        return policy_histograms(self, batch, recurrent_actor_features(self, batch.reshape(self._rollout_shape)))


class RecurrentPlayer:
    """Acts for ``num_envs`` envs with a ``RecurrentPPO``, carrying each env's core state between calls.

    ``player(view, generator)`` resets the rows whose ``view["is_first"]`` is True (as in training) and keeps the
    state after the step for the next call. Used by evaluation and ``load_policy`` (``Policy.reset()`` makes a
    new player; the attribute names match ``DreamerPlayer``'s).

    Args:
        module: the trained module (its ``act`` with the carried state).
        num_envs: envs this player acts for.
        device: where the state lives.
        deterministic: act with the mode.
    """

    def __init__(self, module: RecurrentPPO, num_envs: int, device: torch.device, deterministic: bool) -> None:
        self.module = module
        self.num_envs = num_envs
        self.deterministic = deterministic
        self.state: TensorDict = module.cores.initial_state(num_envs, device)

    @torch.no_grad()
    def __call__(self, view: TensorDict, generator: torch.Generator | None) -> TensorDict:
        td = view.clone(recurse=False)
        td[keys.RECURRENT_STATE] = self.state
        out = self.module.act(td, generator, deterministic=self.deterministic)
        self.state = out[keys.NEXT_RECURRENT_STATE]
        return out
