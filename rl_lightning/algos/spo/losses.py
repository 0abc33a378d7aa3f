"""SPO's losses on one replayed ``[L, B]`` batch (spo.md §1.5): the policy's E/M-step terms and the critic's.

``SPOLosses`` is a mixin of ``SPO`` (``algos/spo/module.py``), which builds what it reads: the ``prior``, the online
``encoder``/``actor``/``critic`` and their Polyak targets, the temperature and KL duals, ``env_spec`` and ``hparams``.
The terms themselves are the pure functions of ``objectives/spo.py``; in games the critic's targets follow the
per-seat credit rule (``seats.py``).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos.spo.prior import gaussian_head
from rl_lightning.algos.spo.seats import seat_critic_terms
from rl_lightning.networks import distributions as D
from rl_lightning.objectives import spo as L


class SPOLosses:
    """``losses(seq)``: every loss term and diagnostic of one replayed batch, the policy's and the critic's."""

    def losses(self, seq: TensorDict) -> TensorDict:
        """All loss terms and diagnostics on one ``[L, B]`` batch of replayed sequences (spo.md §1.5)."""
        hp = self.hparams
        flat = seq.reshape(-1)
        obs = self.prior.normalized(flat[keys.OBS])
        features = self.encoder(obs)
        out = self.actor(features)
        with torch.no_grad():
            target_out = self.target_actor(self.target_encoder(obs))
        args = (flat[keys.SAMPLED_ACTIONS], flat[keys.SAMPLED_WEIGHTS], flat[keys.SAMPLED_ADVANTAGES])
        if self.env_spec.discrete:
            mask = flat.get(keys.ACTION_MASK, None)
            terms = L.spo_discrete_policy_loss(
                D.masked_logits(out, mask), D.masked_logits(target_out, mask), *args,
                self.log_temperature, self.log_alpha, hp.epsilon, hp.epsilon_alpha,
            )  # fmt: skip
        else:
            (mean, std), (target_mean, target_std) = gaussian_head(out), gaussian_head(target_out)
            low, high = self.prior.bounds(mean.device)
            terms = L.spo_continuous_policy_loss(
                mean, std, target_mean, target_std, *args, low, high, self.log_temperature,
                self.log_alpha_mean, self.log_alpha_std, hp.epsilon, hp.epsilon_alpha_mean, hp.epsilon_alpha_std,
            )  # fmt: skip
        if not hp.adaptive_temperature:
            terms["loss_temperature"] = torch.zeros((), device=features.device)
        terms["loss_critic"], terms["explained_variance"] = self._critic_terms(seq)
        return terms

    def _critic_terms(self, seq: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        hp = self.hparams
        length, batch = seq.batch_size
        value = self.prior.value(seq[keys.OBS]).view(length, batch)
        if self.env_spec.num_seats > 1:
            return self._seat_critic_terms(seq, value)
        with torch.no_grad():
            both = torch.cat([seq[keys.OBS], seq[keys.FINAL_OBS]])
            target_encoder = self.target_encoder if self.target_critic_encoder is None else self.target_critic_encoder
            target_features = target_encoder(self.prior.normalized(both))
            target_value, target_next = self.target_critic(target_features).squeeze(-1).chunk(2)
            targets = L.critic_targets(
                seq[keys.REWARD], target_value, target_next, seq[keys.TERMINATED], seq[keys.TRUNCATED],
                hp.gamma, hp.gae_lambda,
            )  # fmt: skip
        residual = (targets - value.detach()).var() / targets.var().clamp_min(1e-8)
        return L.critic_loss(value, targets, hp.vf_coef), 1.0 - residual

    def _seat_critic_terms(self, seq: TensorDict, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Games: the critic's targets follow the per-seat credit rule along each sequence (``seats.py``)."""
        hp = self.hparams
        length, batch = seq.batch_size
        with torch.no_grad():
            target_value = self._target_values(seq[keys.OBS]).view(length, batch)
            final = seq.get(keys.FINAL_OBS, None)  # [L, B, S, *obs]: every seat's own view, when games can truncate
            final_value = None
            if final is not None:
                final_value = self._target_values(final.flatten(0, 2)).view(length, batch, self.env_spec.num_seats)
        return seat_critic_terms(value, target_value, final_value, seq, hp.gamma, hp.gae_lambda, hp.vf_coef)

    def _target_values(self, obs: torch.Tensor) -> torch.Tensor:
        encoder = self.target_encoder if self.target_critic_encoder is None else self.target_critic_encoder
        return self.target_critic(encoder(self.prior.normalized(obs))).squeeze(-1)
