"""Error types the CLI turns into one clean line and a non-zero exit."""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad user input (config value, checkpoint, env id): the message names the field, the value and the fix."""
