"""Error types the CLI turns into one clean line and a non-zero exit."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """Bad user input (config value, checkpoint, env id): the message names the field, the value and the fix."""


def check_fields(checks: list[tuple[str, bool, str]], values: Any, prefix: str = "model") -> None:
    """Raise a one-line ``ConfigError`` for the first ``(name, ok, fix)`` whose ``ok`` is False."""
    for name, ok, fix in checks:
        if not ok:
            raise ConfigError(f"{prefix}.{name}={values[name]!r} is invalid: {fix}")
