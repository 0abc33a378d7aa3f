"""A run's identity from the ``config.yaml`` LightningCLI saves beside its events: task, config name, seed, digest."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rl_lightning.errors import ConfigError

#: Keys that differ between seeds (or between where runs were written) of one config: left out of its digest.
_NOT_THE_CONFIG = (
    ("seed_everything",),
    ("data", "init_args", "seed"),
    ("trainer", "logger"),
    ("ckpt_path",),
    ("trainer", "default_root_dir"),
)


@dataclass(frozen=True)
class Identity:
    """What ``config.yaml`` says of a run (``None`` where it says nothing). See ``run.Run`` for each field."""

    task: str | None
    config: str
    digest: str
    algorithm: str | None
    seed: int | None


def identity(run_dir: Path) -> Identity:
    """Read ``run_dir/config.yaml`` (a run written without one is named after its folder, with no task or seed)."""
    path = run_dir / "config.yaml"
    fallback = run_dir.parent.name if run_dir.name.startswith("version_") else run_dir.name
    if not path.is_file():
        return Identity(task=None, config=fallback, digest="", algorithm=None, seed=None)
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not a readable config.yaml ({type(err).__name__}); remove it or fix it") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys, got {type(config).__name__}")
    return Identity(
        task=task_of(config),
        config=_get(config, "trainer", "logger", "init_args", "name") or fallback,
        digest=digest(config),
        algorithm=_short(_get(config, "model", "class_path")),
        seed=_seed(config),
    )


def task_of(config: dict[str, Any]) -> str | None:
    """The env a config trains on: its ``env_id`` (``HalfCheetah-v5``), else its class's name (``CartPole``)."""
    env = _get(config, "data", "init_args", "env")
    if not isinstance(env, dict):
        return None
    env_id = _get(env, "init_args", "env_id")
    return str(env_id) if env_id else _short(env.get("class_path"))


def digest(config: dict[str, Any]) -> str:
    """A 12-hex-digit digest of ``config`` without the keys that differ between seeds of it (``_NOT_THE_CONFIG``)."""
    kept = json.loads(json.dumps(config, default=str))
    for keys in _NOT_THE_CONFIG:
        node = kept
        for key in keys[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(keys[-1], None)
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]


def _seed(config: dict[str, Any]) -> int | None:
    for value in (config.get("seed_everything"), _get(config, "data", "init_args", "seed")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _short(class_path: Any) -> str | None:
    return class_path.rsplit(".", 1)[-1] if isinstance(class_path, str) and class_path else None


def _get(node: Any, *keys: str) -> Any:
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node
