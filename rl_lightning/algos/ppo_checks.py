"""PPO's settings checked before anything is built: one-line refusals naming the field and the fix."""

from __future__ import annotations

from typing import Any

from rl_lightning import keys
from rl_lightning.algos.histograms import histograms_check
from rl_lightning.envs.base import EnvSpec
from rl_lightning.errors import ConfigError, check_fields
from rl_lightning.networks.encoders import ObsEncoder


def check_observation_table(
    field: str, spec: EnvSpec, encoder: ObsEncoder, normalize_obs: bool, discrete: bool
) -> None:
    """A table's row is a hash of the raw observation, so the features must be the observation itself."""
    if discrete and spec.action_kind != "discrete":
        raise ConfigError(f"model.{field} corrects Discrete logits; this env has {spec.action_kind} actions: set "
                          f"{field}: 0")  # fmt: skip
    if normalize_obs or any(True for _ in encoder.parameters()) or encoder.fixed_decoding:
        raise ConfigError(f"model.{field} hashes the raw observation into a row, so it needs the flat observation "
                          "as the network's input: set normalize_obs: false and encoder: mlp (no CNN, no decoding), "
                          f"or {field}: 0")  # fmt: skip


def check_critic_input(critic_input: str, spec: EnvSpec, normalize_obs: bool) -> bool:
    """Whether the critic reads ``critic_obs``; refuses, in one line, a choice the env or the settings cannot carry."""
    if critic_input not in ("obs", keys.CRITIC_OBS):
        raise ConfigError(f"model.critic_input={critic_input!r} is not a choice; use obs (the acting seat's view) "
                          "or critic_obs (every seat's view, for a centralised critic)")  # fmt: skip
    if critic_input == "obs":
        return False
    if not spec.critic_obs_shape:
        raise ConfigError(f"model.critic_input=critic_obs needs an env that emits critic_obs; {spec.name} emits none: "
                          "set critic_obs: true on the game env (OpenSpielEnv), or critic_input: obs")  # fmt: skip
    if normalize_obs:
        raise ConfigError("model.critic_input=critic_obs reads every seat's raw view, which normalize_obs does not "
                          "cover; set normalize_obs: false (or critic_input: obs)")  # fmt: skip
    return True


def check_hparams(hp: Any) -> None:
    checks = [
        ("update_epochs", hp.update_epochs >= 1, "use >= 1"),
        ("num_minibatches", hp.num_minibatches >= 1, "use >= 1"),
        ("lr", hp.lr > 0, "use a positive learning rate, e.g. 3e-4"),
        ("anneal_lr_start", 0.0 <= hp.get("anneal_lr_start", 0.0) < 1.0, "use a fraction in [0, 1), e.g. 0.5"),
        (
            "anneal_lr_start",
            hp.get("anneal_lr", False) or not hp.get("anneal_lr_start", 0.0),
            "it only delays anneal_lr's decay; set anneal_lr: true (or anneal_lr_start: 0)",
        ),
        ("gamma", 0.0 <= hp.gamma <= 1.0, "use a discount in [0, 1]"),
        ("gae_lambda", 0.0 <= hp.gae_lambda <= 1.0, "use λ in [0, 1]"),
        ("clip_coef", hp.clip_coef > 0, "use a positive clip, e.g. 0.2"),
        ("max_grad_norm", hp.max_grad_norm >= 0, "use 0 (off) or a positive norm"),
        ("target_kl", hp.target_kl is None or hp.target_kl > 0, "use null or a positive KL"),
        ("norm_clip_obs", hp.norm_clip_obs > 0, "use a positive bound, e.g. 10"),
        ("norm_clip_reward", hp.norm_clip_reward > 0, "use a positive bound, e.g. 10"),
        ("critic_warmup_updates", hp.critic_warmup_updates >= 0, "use 0 (off) or a number of updates"),
        ("policy_table_rows", hp.get("policy_table_rows", 0) >= 0, "use 0 (off) or a number of rows, e.g. 65536"),
        ("policy_table_lr_scale", hp.get("policy_table_lr_scale", 1.0) > 0, "use a positive multiple of lr, e.g. 10"),
        (
            "policy_table_lr_scale",
            hp.get("policy_table_rows", 0) or hp.get("policy_table_lr_scale", 1.0) == 1.0,
            "it scales the table's lr; set policy_table_rows too (or policy_table_lr_scale: 1)",
        ),
        ("value_table_rows", hp.get("value_table_rows", 0) >= 0, "use 0 (off) or a number of rows, e.g. 65536"),
        ("value_table_lr_scale", hp.get("value_table_lr_scale", 1.0) > 0, "use a positive multiple of lr, e.g. 10"),
        (
            "value_table_lr_scale",
            hp.get("value_table_rows", 0) or hp.get("value_table_lr_scale", 1.0) == 1.0,
            "it scales the value table's lr; set value_table_rows too (or value_table_lr_scale: 1)",
        ),
        (
            "critic_warmup_updates",
            not (hp.critic_warmup_updates and hp.get("compile_update")),
            "the warm-up switch is read inside the compiled loss, which would recompile every update; set "
            "compile_update: false (or critic_warmup_updates: 0)",
        ),
        histograms_check(hp.histograms_every_n_updates),
    ]
    check_fields(checks, hp)


def check_against_env(hp: Any, spec: EnvSpec, encoder: ObsEncoder) -> None:
    """Settings the env (seats, action kind) or the encoder (decoded entries) cannot carry, refused in one line."""
    if hp.normalize_reward and spec.num_seats > 1:
        raise ConfigError(
            "model.normalize_reward=true is not supported in multi-seat games (its running return is per game, "
            "not per seat); set model.normalize_reward: false"
        )
    if hp.sde and (spec.action_kind != "box" or not hp.hidden_sizes):
        raise ConfigError(f"model.sde=true needs Box actions and hidden layers (gSDE reads the actor's last hidden "
                          f"features); this env has {spec.action_kind} actions and "
                          f"hidden_sizes={list(hp.hidden_sizes)}: set sde: false")  # fmt: skip
    if hp.normalize_obs and encoder.decoded_leaves:  # normalised entries index past the decoding's tables
        raise ConfigError(f"model.normalize_obs=true: model.encoder={hp.encoder!r} decodes "
                          f"{encoder.decoded_leaves} from their raw 0/1 entries, which normalising would "
                          "change; set normalize_obs: false")  # fmt: skip
