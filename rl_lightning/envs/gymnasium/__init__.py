"""Gymnasium envs behind the env contract, on the backend the config chooses.

* ``GymnasiumEnv``: in-process, one env copy at a time; the only backend with snapshots (SPO's search).
* ``GymnasiumVectorEnv``: Gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv`` (``mode: sync | async``).
* ``EnvPoolEnv``: EnvPool's C++ thread pool (``pip install -e ".[envpool]"``).
* ``AleVectorEnv``: ale-py's C++ ``AtariVectorEnv``, Atari presets only (``pip install -e ".[atari]"``).

Atari games run under a named preset (``atari_preset``; see ``atari``) on every backend.

All take the same env arguments (``env_id`` or ``env_class``, ``env_kwargs``, ``wrappers``), present the same
same-step-autoreset contract, and seed env ``i`` from the run's generator.
"""

from __future__ import annotations

from rl_lightning.envs.gymnasium.ale_vector import AleVectorEnv
from rl_lightning.envs.gymnasium.backend import GymnasiumBackend, VectorBackend
from rl_lightning.envs.gymnasium.envpool import EnvPoolEnv
from rl_lightning.envs.gymnasium.eval_env import make_eval_env
from rl_lightning.envs.gymnasium.in_process import GymnasiumEnv
from rl_lightning.envs.gymnasium.vector import GymnasiumVectorEnv
from rl_lightning.envs.gymnasium.wrappers import ClassSpec

__all__ = [
    "AleVectorEnv",
    "ClassSpec",
    "EnvPoolEnv",
    "GymnasiumBackend",
    "GymnasiumEnv",
    "GymnasiumVectorEnv",
    "VectorBackend",
    "make_eval_env",
]
