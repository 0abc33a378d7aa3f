"""The bundled ``configs/*.yaml`` as pytest parameters; those that need an optional extra skip where it is missing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# config stem -> the module its optional extra installs
NEEDS_EXTRA = {
    "ppo_halfcheetah": "mujoco",
    "ppo_halfcheetah_async": "mujoco",
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
    """Every bundled config as a ``pytest.param`` (id: the file name), skipped if its extra is not installed."""
    params = []
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        module = NEEDS_EXTRA.get(path.stem)
        missing = module is not None and importlib.util.find_spec(module) is None
        mark = pytest.mark.skipif(missing, reason=f'needs pip install -e ".[{module}]"')
        params.append(pytest.param(path, id=path.name, marks=mark))
    return params
