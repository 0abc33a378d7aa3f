"""Command-line fixes applied before parsing: YAML syntax errors with file:line, negative numbers as values."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from rl_lightning.errors import ConfigError


def check_yaml_syntax(path: str) -> None:
    """Raise a one-line ``ConfigError`` with ``file:line:column`` if the YAML file at ``path`` does not parse.

    jsonargparse reads the file into a string first, so its own message says only "while parsing a flow
    sequence" and loses the file and line. Only the syntax is checked here (compose, no construction).
    """
    try:
        for _ in yaml.compose_all(Path(path).read_text(), Loader=yaml.SafeLoader):
            pass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        what = " ".join(part for part in (err.problem, err.context) if part)
        raise ConfigError(f"--config {where}: YAML syntax error: {what}; fix the file at that line") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"--config {path}: YAML syntax error: {err}; fix the file") from None


def _is_negative_number(arg: str) -> bool:
    if not arg.startswith("-"):
        return False
    try:
        float(arg)
    except ValueError:
        return False
    return True


def join_negative_values(args: Sequence[str]) -> list[str]:
    """``--key -1e-3`` → ``--key=-1e-3``: argparse takes ``-1e-3`` (or ``-inf``) for an option otherwise.

    Every rl-lightning option but the flags takes a value, and no option looks like a number, so a number
    after an ``--option`` without ``=`` is always that option's value.
    """
    out: list[str] = []
    for arg in args:
        previous = out[-1] if out else ""
        if _is_negative_number(arg) and previous.startswith("--") and "=" not in previous:
            out[-1] = f"{previous}={arg}"
        else:
            out.append(arg)
    return out
