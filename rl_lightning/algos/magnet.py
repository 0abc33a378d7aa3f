"""PPO's magnet regulariser (``model.magnet``): the magnet policy, its weight on a schedule over env steps, and the
``train/magnet_kl`` / ``train/magnet_coef`` it logs. The term itself is ``objectives/magnet.py``.

Magnets: ``uniform`` (uniform over the legal actions: entropy regularisation, as MMD and Rudolph et al. 2026 use),
``ema`` (an exponential moving average of the policy's own weights, updated before each update by
``θ_ρ ← θ_ρ + ema_tau · (θ − θ_ρ)``: the EMAgnet form of a moving magnet) and ``initial`` (the weights the run
started from, frozen: after ``init_weights`` a behaviour-cloned policy pulls the learner back toward its clone).
An ``ema`` magnet may start late: with ``ema_start_env_steps`` the magnet is uniform until that many env steps, then
copies the policy's weights at that update and moves as an EMA from there (a two-phase magnet: the annealed uniform
magnet descends fast toward a regularised equilibrium; the moving magnet's fixed point is the equilibrium itself, as
the "magnet update" of Sokota et al.), with the weight ``ema_coef`` from then on (``null``: the schedule's weight).
``ema_final_tau`` slows the EMA as the run goes: its rate falls geometrically from ``ema_tau`` to ``ema_final_tau``
over the weight's decay (``decay_env_steps``, or ``data.total_env_steps``), then stays there. ``reset_env_steps``
replaces the EMA by Sokota et al.'s magnet reset: the magnet is a frozen copy of the policy, re-copied whenever that
many env steps have passed since the last copy (a proximal point in policy space, no averaging of weights).
``lr_follows_below`` couples the learning rate to the weight: below that weight the update's lr is scaled by
``weight / lr_follows_below``. MMD's step must shrink with its regularisation (a step that converges at one weight
cycles at a lower one), and Adam keeps the step in policy space near ``lr`` however small the gradients get, so a
weight annealed with a constant lr ends cycling instead of converging.
The magnet's weights (and whether a late EMA has started) are buffers: checkpointed with the module (a resumed EMA
continues), never optimised.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from rl_lightning import keys
from rl_lightning.errors import ConfigError
from rl_lightning.objectives.magnet import SCHEDULES, magnet_kl, magnet_weight

MAGNETS = ("uniform", "ema", "initial")
_FIELDS = {"kind": str, "coef": float, "schedule": str, "final_coef": float, "decay_env_steps": int, "ema_tau": float,
           "ema_start_env_steps": int, "ema_coef": float, "ema_final_tau": float, "reset_env_steps": int,
           "lr_follows_below": float}  # fmt: skip
_NETS = ("encoder", "actor")  # what the magnet copies: the policy's path from observation to logits


def magnet_settings(spec: str | dict[str, Any]) -> dict[str, Any]:
    """``model.magnet`` checked: a magnet name (``initial``) or ``{kind, coef, schedule, final_coef,
    decay_env_steps, ema_tau, ema_start_env_steps, ema_coef, ema_final_tau, reset_env_steps, lr_follows_below}``;
    defaults filled in. One-line ``ConfigError`` naming the bad field."""
    settings: dict[str, Any] = {"kind": "uniform", "coef": 0.05, "schedule": "constant", "final_coef": 0.0,
                                "decay_env_steps": None, "ema_tau": 0.01, "ema_start_env_steps": None,
                                "ema_coef": None, "ema_final_tau": None, "reset_env_steps": None,
                                "lr_follows_below": None}  # fmt: skip
    given = {"kind": spec} if isinstance(spec, str) else dict(spec)
    for key, value in given.items():
        if key not in _FIELDS:
            raise ConfigError(f"model.magnet.{key}: not a magnet setting; the settings are {sorted(_FIELDS)}")
        if value is not None and not isinstance(value, (int, float) if _FIELDS[key] is float else _FIELDS[key]):
            raise ConfigError(f"model.magnet.{key}={value!r}: expected a {_FIELDS[key].__name__}")
        settings[key] = value
    checks = [
        ("kind", settings["kind"] in MAGNETS, f"choose one of {list(MAGNETS)}"),
        ("schedule", settings["schedule"] in SCHEDULES, f"choose one of {list(SCHEDULES)}"),
        ("coef", settings["coef"] >= 0, "use a weight >= 0"),
        ("final_coef", settings["final_coef"] >= 0, "use a weight >= 0"),
        ("final_coef", settings["schedule"] != "exponential" or min(settings["coef"], settings["final_coef"]) > 0,
         "an exponential decay needs coef and final_coef > 0"),
        ("decay_env_steps", settings["decay_env_steps"] is None or settings["decay_env_steps"] > 0,
         "use a positive number of env steps, or null for data.total_env_steps"),
        ("ema_tau", 0 < settings["ema_tau"] <= 1, "use a rate in (0, 1]"),
        ("ema_start_env_steps", settings["ema_start_env_steps"] is None or settings["kind"] == "ema",
         "a late start needs kind: ema; drop it"),
        ("ema_start_env_steps", settings["ema_start_env_steps"] is None or settings["ema_start_env_steps"] >= 0,
         "use a number of env steps >= 0, or null for an EMA from the start"),
        ("ema_coef", settings["ema_coef"] is None or settings["kind"] == "ema", "ema_coef needs kind: ema; drop it"),
        ("ema_coef", settings["ema_coef"] is None or settings["ema_coef"] >= 0, "use a weight >= 0, or null"),
        ("ema_final_tau", settings["ema_final_tau"] is None or settings["kind"] == "ema",
         "a decaying EMA rate needs kind: ema; drop it"),
        ("ema_final_tau", settings["ema_final_tau"] is None or 0 < settings["ema_final_tau"] <= 1,
         "use a rate in (0, 1], or null for a constant ema_tau"),
        ("reset_env_steps", settings["reset_env_steps"] is None or settings["kind"] == "ema",
         "a magnet reset needs kind: ema; drop it"),
        ("reset_env_steps", settings["reset_env_steps"] is None or settings["reset_env_steps"] > 0,
         "use a positive number of env steps, or null for an EMA"),
        ("lr_follows_below", settings["lr_follows_below"] is None or settings["lr_follows_below"] > 0,
         "use a positive weight, or null for an lr independent of the weight"),
    ]  # fmt: skip
    for field, ok, fix in checks:
        if not ok:
            raise ConfigError(f"model.magnet.{field}={settings[field]!r}: {fix}")
    return settings


class Magnet(nn.Module):
    """The magnet of one PPO module: ``loss(module, mb)`` to add to a minibatch's loss, ``before_update(module)``
    once per update (EMA step, weight for the update), ``metrics()`` for the update's log.

    Args:
        module: the PPO whose policy is regularised (after ``init_weights`` was loaded: ``initial`` copies it).
        spec: ``model.magnet`` (``magnet_settings``).
    """

    def __init__(self, module: Any, spec: str | dict[str, Any]) -> None:
        super().__init__()
        self.settings = magnet_settings(spec)
        if module.hparams.get("compile_update"):
            raise ConfigError("model.magnet with model.compile_update=true: the magnet term is not compiled; set "
                              "compile_update: false")  # fmt: skip
        if module.env_spec.action_kind != "discrete":
            raise ConfigError(f"model.magnet regularises a categorical policy; this env's actions are "
                              f"{module.env_spec.action_kind}: drop model.magnet")  # fmt: skip
        self.names: dict[str, list[str]] = {}
        if self.settings["kind"] != "uniform":
            for net in _NETS:
                self.names[net] = [name for name, _ in getattr(module, net).named_parameters()]
                for name, param in getattr(module, net).named_parameters():
                    self.register_buffer(_buffer(net, name), param.detach().clone())
        if self.settings["ema_start_env_steps"] is not None:  # uniform until the EMA starts; saved with the weights
            self.register_buffer("ema_started", torch.tensor(False))
        self._late_uniform = self.settings["ema_start_env_steps"] is not None  # mirrors ``ema_started``, per update
        if self.settings["reset_env_steps"] is not None:  # env steps at the last copy; saved with the weights
            self.register_buffer("reset_at", torch.tensor(0, dtype=torch.long))
        self.coef = self.settings["coef"]
        self._kl_sum: torch.Tensor | None = None
        self._steps = 0

    def _weights(self, net: str) -> dict[str, torch.Tensor]:
        return {name: getattr(self, _buffer(net, name)) for name in self.names[net]}

    def _uniform_now(self) -> bool:
        """Whether the magnet is uniform for this update: the ``uniform`` kind, or a late EMA not started yet (as
        of the last ``before_update``: read from the buffer once per update, not once per minibatch)."""
        return not self.names or self._late_uniform

    def magnet_logits(self, module: Any, obs: Any) -> torch.Tensor | None:
        """The magnet's logits on (normalised) observations; ``None`` while the magnet is uniform."""
        if self._uniform_now():
            return None
        features = functional_call(module.encoder, self._weights("encoder"), (obs,))
        return functional_call(module.actor, self._weights("actor"), (features,))

    def loss(self, module: Any, mb: dict[str, Any]) -> torch.Tensor:
        """``coef · mean KL(π_θ ‖ ρ)`` over the minibatch's rows (``obs`` already normalised, or ``features`` of a
        fixed decoding; ``action_mask``)."""
        mask = mb.get(keys.ACTION_MASK)
        if keys.FEATURES in mb:  # a fixed decoding (no parameters): the magnet's features are the policy's
            features = mb[keys.FEATURES]
            uniform = self._uniform_now()
            magnet = None if uniform else functional_call(module.actor, self._weights("actor"), (features,))
        else:
            features, magnet = module.encoder(mb[keys.OBS]), self.magnet_logits(module, mb[keys.OBS])
        kl = magnet_kl(module.actor(features), magnet, mask).mean()
        detached = kl.detach()
        self._kl_sum = detached if self._kl_sum is None else self._kl_sum + detached
        self._steps += 1
        return self.coef * kl

    @torch.no_grad()
    def before_update(self, module: Any) -> None:
        """Move an ``ema`` magnet toward the current weights (a late one: copy them at its first update) and set
        this update's weight from the env steps."""
        decay = self.settings["decay_env_steps"] or module.total_env_steps
        if self.settings["schedule"] != "constant" and not decay:
            schedule = self.settings["schedule"]
            raise ConfigError(f"model.magnet.schedule={schedule!r} decays over model.magnet.decay_env_steps or "
                              "data.total_env_steps, and neither is set; set one")  # fmt: skip
        if self.settings["ema_final_tau"] is not None and not decay:
            raise ConfigError("model.magnet.ema_final_tau decays over model.magnet.decay_env_steps or "
                              "data.total_env_steps, and neither is set; set one")  # fmt: skip
        progress = module.env_steps / decay if decay else 0.0
        s = self.settings
        if s["kind"] == "ema":
            self._ema_step(module, self._tau(progress))
        self.coef = magnet_weight(s["schedule"], s["coef"], s["final_coef"], progress)
        if s["ema_coef"] is not None and not self._uniform_now():
            self.coef = s["ema_coef"]

    def lr_scale(self) -> float:
        """The factor on this update's learning rate: ``min(1, weight / lr_follows_below)``, or 1 when unset."""
        below = self.settings["lr_follows_below"]
        return 1.0 if below is None else min(1.0, self.coef / below)

    def _tau(self, progress: float) -> float:
        """The EMA rate after ``progress`` of the decay: ``ema_tau``, or geometric toward ``ema_final_tau``."""
        tau, final = self.settings["ema_tau"], self.settings["ema_final_tau"]
        return tau if final is None else magnet_weight("exponential", tau, final, progress)

    def _ema_step(self, module: Any, tau: float) -> None:
        """``θ_ρ ← θ_ρ + tau · (θ − θ_ρ)``; a late EMA copies ``θ`` at its first update (env steps counted
        with this update's rollout) and is left alone before it."""
        rate: float | None = tau
        if hasattr(self, "ema_started"):
            self._late_uniform = not bool(self.ema_started)  # after a resume: the checkpoint's state
        if self._late_uniform:
            if module.env_steps < self.settings["ema_start_env_steps"]:
                return
            self.ema_started.fill_(True)
            self._late_uniform = False
            rate = None  # start from the current policy: a copy
        elif self.settings["reset_env_steps"] is not None:  # a frozen copy until the next reset
            if module.env_steps - int(self.reset_at) < self.settings["reset_env_steps"]:
                return
            rate = None
        if hasattr(self, "reset_at"):
            self.reset_at.fill_(module.env_steps)
        for net in _NETS:
            params = dict(getattr(module, net).named_parameters())
            weights = self._weights(net)
            if weights:
                targets = [params[name].detach() for name in weights]
                if rate is None:
                    torch._foreach_copy_(list(weights.values()), targets)
                else:
                    torch._foreach_lerp_(list(weights.values()), targets, rate)

    def metrics(self) -> dict[str, torch.Tensor]:
        """``train/magnet_kl`` (mean over the update's minibatches) and ``train/magnet_coef``; resets the sums."""
        out = {"train/magnet_coef": torch.tensor(self.coef)}
        if self._kl_sum is not None:
            out["train/magnet_kl"] = self._kl_sum / self._steps
        self._kl_sum, self._steps = None, 0
        return out


def _buffer(net: str, name: str) -> str:
    return f"{net}__{name.replace('.', '__')}"
