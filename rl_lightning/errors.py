"""Error types the CLI turns into one clean line and a non-zero exit."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


class ConfigError(ValueError):
    """Bad user input (config value, checkpoint, env id): the message names the field, the value and the fix."""


def nearest(name: str, choices: Iterable[str]) -> str | None:
    """The one of ``choices`` closest to ``name`` (difflib's ratio of at least 0.6), for a "did you mean" hint."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return close[0] if close else None


def check_fields(checks: list[tuple[str, bool, str]], values: Any, prefix: str = "model") -> None:
    """Raise a one-line ``ConfigError`` for the first ``(name, ok, fix)`` whose ``ok`` is False."""
    for name, ok, fix in checks:
        if not ok:
            raise ConfigError(f"{prefix}.{name}={values[name]!r} is invalid: {fix}")


class EnvError(RuntimeError):
    """An env failed during a run (it raised, or returned NaN/inf): the message names the env and the env index.

    Args:
        env: the env's name (class or Gymnasium id).
        index: which env of the batch (``None`` when the whole batch failed).
        num_envs: the batch size, shown next to ``index``.
        problem: what happened, e.g. ``"raised RuntimeError: boom"``.
    """

    def __init__(self, env: str, index: int | None, num_envs: int, problem: str) -> None:
        where = f"env {env!r}" + (f" (index {index} of {num_envs})" if index is not None else "")
        super().__init__(f"{where} {problem}")
        self.env, self.index, self.num_envs, self.problem = env, index, num_envs, problem

    def __reduce__(self) -> tuple[type, tuple[str, int | None, int, str]]:
        return type(self), (self.env, self.index, self.num_envs, self.problem)


def require_torch_compile(field: str) -> None:
    """Refuse ``field=true`` in one line where this Python/torch build cannot run ``torch.compile``."""
    import platform

    import torch._dynamo

    if not torch._dynamo.is_dynamo_supported():
        raise ConfigError(
            f"{field}=true needs torch.compile, which torch {torch.__version__} does not support on Python "
            f"{platform.python_version()}: set {field}: false"
        )


def require_positive(field_name: str, value: int, fix: str) -> None:
    """Raise a ``ConfigError`` naming ``field_name`` unless ``value`` is an int >= 1; ``fix`` says what to set."""
    if not isinstance(value, int) or value < 1:
        raise ConfigError(f"{field_name}={value!r}: must be a positive integer; {fix}")
