"""The RL-clock cadence shared by callbacks: every N learner updates, or each time env steps cross a multiple of N."""

from __future__ import annotations

from typing import Any

from rl_lightning.errors import ConfigError


def check_cadence(owner: str, every_n_updates: int | None, every_n_env_steps: int | None) -> None:
    """Raise ``ConfigError`` unless exactly one of the two is set, and it is >= 1."""
    if (every_n_updates is None) == (every_n_env_steps is None):
        raise ConfigError(
            f"{owner}: set exactly one of every_n_updates or every_n_env_steps "
            f"(got every_n_updates={every_n_updates}, every_n_env_steps={every_n_env_steps})"
        )
    for name, value in (("every_n_updates", every_n_updates), ("every_n_env_steps", every_n_env_steps)):
        if value is not None and value < 1:
            raise ConfigError(f"{owner}: {name}={value} must be >= 1")


def cadence_due(
    pl_module: Any, every_n_updates: int | None, every_n_env_steps: int | None, last_env_steps: int
) -> bool:
    """True after every ``every_n_updates``-th update, or when env steps crossed a multiple since ``last_env_steps``."""
    if every_n_updates is not None:
        return pl_module.updates % every_n_updates == 0
    assert every_n_env_steps is not None
    return pl_module.env_steps // every_n_env_steps > last_env_steps // every_n_env_steps
