"""The bundled ``configs/*.yaml`` as pytest parameters; those that need an optional extra skip where it is missing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# config stem -> the module its optional extra installs
NEEDS_EXTRA = {
    "ppo_halfcheetah": "mujoco",
    "ppo_halfcheetah_async": "mujoco",
    "ppo_hopper": "mujoco",
    "ppo_walker2d": "mujoco",
    "ppo_ant": "mujoco",
    "ppo_humanoid": "mujoco",
    "ppo_swimmer": "mujoco",
    "spo_halfcheetah": "mujoco",
    "spo_hopper": "mujoco",
    "ppo_hearts": "pyspiel",
    "ppo_connect_four": "pyspiel",
    "ppo_connect_four_board": "pyspiel",
    "spo_connect_four": "pyspiel",
    "bc_hearts": "pyspiel",
    "ppo_kuhn": "pyspiel",
    "ppo_leduc": "pyspiel",
    "ppo_tictactoe_selfplay": "pyspiel",
}


def bundled_configs() -> list:
    """Every bundled config as a ``pytest.param`` (id: the file name), skipped if its extra is not installed.

    A config that compiles its update fits in the heavy tier: its first fit spends ~40 s in torch.compile here."""
    params = []
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        module = NEEDS_EXTRA.get(path.stem)
        missing = module is not None and importlib.util.find_spec(module) is None
        mark = pytest.mark.skipif(missing, reason=f'needs pip install -e ".[{module}]"')
        marks = [mark, pytest.mark.heavy] if compiles(path) else [mark]
        params.append(pytest.param(path, id=path.name, marks=marks))
    return params


def compiles(path: Path) -> bool:
    """Whether the config turns on PPO's compiled update (``model.init_args.compile_update``)."""
    model = (yaml.safe_load(path.read_text()) or {}).get("model") or {}
    return bool((model.get("init_args") or {}).get("compile_update"))
