"""Setup-time checks of DreamerV3's hyper-parameters: one line naming the field, the value and the fix."""

from __future__ import annotations

from typing import Any

from rl_lightning.algos.histograms import histograms_check
from rl_lightning.errors import check_fields
from rl_lightning.networks.dreamer_nets import DREAMER_SIZES

OPTIMIZERS = ("laprop", "adam")


def check_dreamer_hparams(hp: Any) -> None:
    """Raise ``ConfigError`` for the first invalid DreamerV3 hyper-parameter."""
    checks = [
        ("size", hp.size in DREAMER_SIZES, f"choose one of {sorted(DREAMER_SIZES)}"),
        ("optimizer", hp.optimizer in OPTIMIZERS, f"choose one of {list(OPTIMIZERS)}"),
        ("lr", hp.lr > 0, "use a positive learning rate, e.g. 4e-5"),
        ("eps", hp.eps > 0, "use a positive epsilon (1e-20 for laprop, 1e-8 for adam)"),
        ("warmup_steps", hp.warmup_steps >= 0, "use 0 (off) or a positive number of gradient steps"),
        ("agc", hp.agc >= 0, "use 0 (off) or a positive clip ratio, e.g. 0.3"),
        ("max_grad_norm", hp.max_grad_norm > 0, "use a positive norm, e.g. 1000"),
        ("horizon", isinstance(hp.horizon, int) and hp.horizon >= 1, "use an imagination horizon >= 1, e.g. 15"),
        ("discount_horizon", hp.discount_horizon >= 1, "use >= 1 (γ = 1 − 1/discount_horizon), e.g. 333"),
        ("lam", 0.0 <= hp.lam <= 1.0, "use λ in [0, 1], e.g. 0.95"),
        ("free_nats", hp.free_nats >= 0, "use 0 (off) or a positive number of nats, e.g. 1.0"),
        ("tau", 0.0 < hp.tau <= 1.0, "use an EMA rate in (0, 1], e.g. 0.02"),
        ("unimix", 0.0 <= hp.unimix < 1.0, "use a uniform mix in [0, 1), e.g. 0.01"),
        ("bins", isinstance(hp.bins, int) and hp.bins >= 3 and hp.bins % 2 == 1, "use an odd number >= 3, e.g. 255"),
        ("twohot_space", hp.twohot_space in ("raw", "symlog"), "choose 'raw' (2024) or 'symlog' (2023)"),
        ("initial", hp.initial in ("zeros", "learned"), "choose 'zeros' (2024) or 'learned' (2023)"),
        ("norm", hp.norm in ("rms", "layer"), "choose 'rms' (2024) or 'layer' (2023)"),
        ("entropy_coef", hp.entropy_coef >= 0, "use a non-negative entropy bonus, e.g. 3e-4"),
        ("retnorm_decay", 0.0 <= hp.retnorm_decay < 1.0, "use an EMA decay in [0, 1), e.g. 0.99"),
        ("retnorm_limit", hp.retnorm_limit > 0, "use a positive limit, e.g. 1.0"),
        histograms_check(hp.histograms_every_n_updates),
    ]
    for scale in ("rec", "rew", "con", "dyn", "rep", "policy", "value", "repval"):
        checks.append((f"{scale}_scale", hp[f"{scale}_scale"] >= 0, "use a non-negative loss weight"))
    check_fields(checks, hp)
