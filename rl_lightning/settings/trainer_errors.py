"""Turn Lightning's errors about a bad ``trainer.*`` setting into one line naming the field and its valid choices."""

from __future__ import annotations

import re
from typing import Any

from lightning.pytorch.accelerators import AcceleratorRegistry
from lightning.pytorch.strategies import StrategyRegistry

from rl_lightning.errors import ConfigError

# the Trainer arguments whose values Lightning checks at construction (accelerator connector, strategy registry)
_FIELDS = ("strategy", "accelerator", "devices", "num_nodes", "precision", "plugins")


def _accelerator_choices() -> str:
    names = sorted(AcceleratorRegistry.available_accelerators())
    here = [name for name in names if AcceleratorRegistry[name]["accelerator"].is_available()]
    return f"one of auto, {', '.join(names)} (available on this machine: {', '.join(here)})"


def _strategy_choices() -> str:
    names = [name for name in StrategyRegistry.available_strategies() if "find_unused" not in name]
    return f"one of auto, {', '.join(names)}"


_CHOICES = {
    "accelerator": _accelerator_choices,
    "strategy": _strategy_choices,
    "devices": lambda: "a positive int, a list of device indices such as [0, 1], or auto (cpu takes an int > 0)",
    "num_nodes": lambda: "a positive int",
}


def _field_of(message: str) -> str | None:
    """The Trainer argument a Lightning message is about: ``field=`` first, else the first field named."""
    assigned = re.search(rf"\b({'|'.join(_FIELDS)})\s*=", message)
    if assigned:
        return assigned.group(1)
    named = [(match.start(), match.group(1)) for match in re.finditer(rf"\b({'|'.join(_FIELDS)})\b", message)]
    if named:
        return min(named)[1]
    return "accelerator" if "gpu" in message.lower() else None  # "No supported gpu backend found!"


def trainer_setting_error(err: Exception, config: dict[str, Any]) -> ConfigError:
    """A one-line ``ConfigError`` for an exception raised while constructing ``Trainer(**config)``."""
    message = " ".join(str(err).split()) or type(err).__name__
    reason = message.split(". ")[0].rstrip(".")
    field = _field_of(message)
    if field is None:
        return ConfigError(f"trainer: {reason}; check the trainer settings (rl-lightning fit --help)")
    choices = _CHOICES.get(field)
    fix = f"use {choices()}" if choices else "see rl-lightning fit --help"
    return ConfigError(f"trainer.{field}={config.get(field)!r}: {reason}; {fix}")
