"""PPO's actor-critic at work: acting for the collector and evaluating stored actions, for every action kind.

``PPOPolicy`` is a mixin of ``PPO`` (``algos/ppo.py``), which builds what it reads: ``env_spec``, ``encoder`` and
``critic_encoder``, the ``actor`` and ``critic`` MLPs, ``log_std`` (Box actions), ``obs_normalizer``,
``action_width`` and ``_value_when_acting``. ``RecurrentPPO`` reuses the head methods on its core's features.
With ``sde`` (Box actions) ``log_std`` is gSDE's ``[L, A]`` matrix and the noise comes from exploration matrices
(``networks/sde.py``) that ``acting_policy`` draws once per rollout, one per env.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.errors import ConfigError
from rl_lightning.networks import distributions as D
from rl_lightning.networks.sde import sde_log_std, sde_matrices, sde_noise

_NOISE_KINDS = ("discrete", "box")  # action kinds whose sampling ``act_from_noise`` implements


class PPOPolicy:
    """The acting policy (``act``, ``act_noise``/``act_from_noise`` for the fused step) and ``evaluate_actions``:
    a masked categorical (Discrete), a Gaussian with a state-independent log-std (Box), independent categoricals
    (MultiDiscrete) or Bernoullis (MultiBinary) on the actor's output, the critic's value beside it."""

    def _obs(self, td: TensorDict) -> torch.Tensor | TensorDict:
        obs = td[keys.OBS]
        return obs if self.obs_normalizer is None else self.obs_normalizer(obs)

    def _features(self, td: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actor features, critic features)``: one tensor twice when the encoder is shared."""
        obs = self._obs(td)
        features = self.encoder(obs)
        return features, features if self.critic_encoder is None else self.critic_encoder(obs)

    @property
    def decodes_once(self) -> bool:
        """The encoders are a fixed decoding (``ObsEncoder.fixed_decoding``; the critic's, if separate, the same map):
        ``update`` decodes each row once and the minibatches carry ``features``."""
        encoders = [self.encoder] if self.critic_encoder is None else [self.encoder, self.critic_encoder]
        return all(getattr(encoder, "fixed_decoding", False) for encoder in encoders)

    @torch.no_grad()
    def logits_and_value(self, obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(masked logits [N, A], value [N])`` of a batch of raw observations: the network as a search reads it
        (``algos/alphazero/puct.py``)."""
        if self.critic_reads_state:
            raise ConfigError(
                "this PPO's critic reads critic_obs (every seat's view), which a search over one "
                "seat's observation cannot supply; search with a network whose critic_input is obs"
            )
        td = TensorDict({keys.OBS: obs, keys.ACTION_MASK: mask}, batch_size=[len(obs)]).to(self.device)
        features, critic_features = self._features(td)
        return self._logits(td, features), self.critic(critic_features).squeeze(-1)

    def _critic_features(self, td: TensorDict) -> torch.Tensor:
        """What the critic reads: the encoded observation, or (``critic_input: critic_obs``) every seat's view."""
        if self.critic_reads_state:
            return td[keys.CRITIC_OBS].float()
        return (self.encoder if self.critic_encoder is None else self.critic_encoder)(self._obs(td))

    def _logits(self, td: TensorDict, features: torch.Tensor) -> torch.Tensor:
        return D.masked_logits(self.actor(features), td.get(keys.ACTION_MASK, None))

    def _gaussian(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Box actions: ``(mean, log_std [N, A], gSDE features or None)``; the log-std is the state-independent
        parameter broadcast, or with ``sde`` gSDE's per-row log-std from the actor's last hidden features."""
        if not self.hparams.get("sde", False):
            mean = self.actor(features)
            return mean, self.log_std.expand_as(mean), None
        latent = self.actor[:-1](features)
        return self.actor[-1:](latent), sde_log_std(latent, self.log_std), latent  # [-1:]: a Float32Head

    @property
    def acts_from_noise(self) -> bool:
        """Discrete and Box actions: sampling is one noise draw per action logit or dimension (not gSDE's)."""
        return self.env_spec.action_kind in _NOISE_KINDS and not self.hparams.get("sde", False)

    def acting_policy(self, env: Any, deterministic: bool = False, training: bool = True) -> Any:
        """With ``sde``, a stochastic policy holds one exploration matrix per env row, drawn from the collector's
        generator at its first call: a collector asks for a policy per rollout, so the noise function stays fixed
        for a rollout (SB3's ``sde_sample_freq=-1``). Otherwise the ``RLModule`` default."""
        if deterministic or not self.hparams.get("sde", False):
            return super().acting_policy(env, deterministic, training)  # type: ignore[misc]
        held: list[torch.Tensor] = []

        def policy(obs: TensorDict, generator: torch.Generator | None) -> TensorDict:
            if not held:
                held.append(sde_matrices(self.log_std.detach(), obs.batch_size[0], generator))
            return self.act(obs, generator, sde_noise_matrices=held[0])

        return policy

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
    def act(
        self,
        td: TensorDict,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
        sde_noise_matrices: torch.Tensor | None = None,
    ) -> TensorDict:
        """Act on a batch ``[N]``. ``sde_noise_matrices`` ``[N, L, A]``: gSDE's exploration matrices to act with
        (``acting_policy`` holds them over a rollout); ``None`` draws fresh ones for this call's rows."""
        if not deterministic and self.acts_from_noise:
            return self.act_from_noise(td, self.act_noise(generator, tuple(td.batch_size), td.device))
        features, critic_features = self._features(td)
        return self._act_on(td, features, critic_features, generator, deterministic, sde_noise_matrices)

    def _act_on(
        self,
        td: TensorDict,
        features: torch.Tensor,
        critic_features: torch.Tensor,
        generator: torch.Generator | None,
        deterministic: bool,
        sde_noise_matrices: torch.Tensor | None = None,
    ) -> TensorDict:
        """``act`` on encoded features (``RecurrentPPO`` passes its recurrent core's outputs)."""
        out: dict[str, torch.Tensor] = {}
        kind = self.env_spec.action_kind
        if kind == "discrete":
            logits = self._logits(td, features)
            action = logits.argmax(-1) if deterministic else D.categorical_sample(logits, generator)
            out[keys.LOGPROB] = D.categorical_log_prob(logits, action)
        elif kind == "box":
            mean, log_std, latent = self._gaussian(features)
            if deterministic:
                action = mean
            elif latent is None:
                action = D.normal_sample(mean, log_std, generator)
            else:
                matrices = sde_noise_matrices
                if matrices is None:
                    matrices = sde_matrices(self.log_std, latent.shape[0], generator)
                action = mean + sde_noise(latent, matrices)
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
        if self.critic_reads_state:
            features, critic_features = self.encoder(self._obs(td)), self._critic_features(td)
            return self._heads_log_prob_entropy_value(features, critic_features, td[keys.ACTION],
                                                      td.get(keys.ACTION_MASK, None))  # fmt: skip
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
            mean, log_std, _ = self._gaussian(features)
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
