"""Command-line fixes applied before parsing: bundled config names, YAML syntax errors with file:line, negative
numbers as values. Nothing here imports the rest of the package, so every subcommand may use it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from rl_lightning.errors import ConfigError

_REPO_ROOT = Path(__file__).resolve().parents[2]  # rl_lightning/settings/cli_args.py -> the checkout (configs/)
_SHARE_ROOT = Path(sys.prefix) / "share" / "rl_lightning"


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


def bundled_dirs() -> list[Path]:
    """Where bundled ``configs/`` and ``callbacks/`` live: the source tree, or the installed share dir."""
    return [root for root in (_REPO_ROOT, _SHARE_ROOT) if (root / "configs").is_dir()]


def resolve_config(value: str) -> str:
    """A ``--config`` value as given if it exists, else the bundled config or fragment of that name."""
    if Path(value).is_file() or value.lstrip().startswith(("{", "[")) or "\n" in value:
        return value
    name = value if value.endswith((".yaml", ".yml")) else f"{value}.yaml"
    candidates = []
    for root in bundled_dirs():
        candidates += [root / name, root / "configs" / name, root / "callbacks" / name]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    available = sorted(
        f"{sub}/{p.name}"
        for root in bundled_dirs()
        for sub in ("configs", "callbacks")
        for p in (root / sub).glob("*.yaml")
    )
    raise ConfigError(
        f"--config {value!r}: no such file and no bundled config of that name; bundled: {', '.join(available)}"
    )


def resolve_config_args(args: Sequence[str]) -> list[str]:
    """Rewrite every ``--config X`` / ``--config=X`` so bundled names work from any directory (and check its YAML
    syntax), and join ``--key -1e-3`` into ``--key=-1e-3``."""
    out: list[str] = []
    expect_value = False
    for arg in join_negative_values(args):
        if expect_value:
            out.append(_checked_config(arg))
            expect_value = False
        elif arg == "--config":
            out.append(arg)
            expect_value = True
        elif arg.startswith("--config="):
            out.append("--config=" + _checked_config(arg.split("=", 1)[1]))
        else:
            out.append(arg)
    return out


def _checked_config(value: str) -> str:
    resolved = resolve_config(value)
    if Path(resolved).is_file():
        check_yaml_syntax(resolved)
    return resolved
