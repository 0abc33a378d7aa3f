"""How ``GymnasiumEnv`` copies a live env: the real state, cheaply, one copier per env kind.

``copy.deepcopy`` is a true copy only for plain-Python envs (CartPole, Pendulum). Envs built on
``gymnasium.utils.EzPickle`` (MuJoCo, ale-py's ``AtariEnv``, Box2D) pickle as their constructor arguments, so a deep
copy is a fresh env at its initial state with an unseeded RNG. For those the copier keeps a pool of released env
objects and copies the state into one of them:

* the simulator through its own API: MuJoCo ``mj_copyData`` (all of ``MjData``, derived quantities included: Humanoid's
  reward reads body positions the previous step computed), ALE ``cloneState(include_rng=True)``/``restoreState``
  (emulator, frame counters, sticky-action RNG) plus the held sticky action (``snapshot_ale``); the ``MjModel`` is
  not copied: every env the factory builds has the same constants;
* every layer's own Python attributes, walking the source and target wrapper stacks side by side (``TimeLimit``'s
  elapsed steps, ``OrderEnforcing``'s flag, frame stacks and frame buffers, life-loss flags, the env's
  ``np_random``). Attributes that are configuration (spaces, spec, metadata, constructor records) are skipped;
  a reference to another layer or to the simulator maps to its counterpart in the target stack.

An EzPickle env of another kind (Box2D, a user's env) has no copier: ``copier_class`` returns None and the backend
cannot snapshot it.
"""

from __future__ import annotations

import copy
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
from gymnasium.utils import EzPickle

from rl_lightning.envs.gymnasium.snapshot_ale import copy_ale, track_sticky

#: What a copy may share with its source: immutable values.
_ATOMS = (bool, int, float, complex, str, bytes, type(None))
#: Wrapper attributes that are configuration, identical in every env the factory builds (``env`` is the next layer).
_WRAPPER_SKIP = frozenset({"env", "_action_space", "_observation_space", "_metadata", "_cached_spec", "_saved_kwargs"})
#: The same for the unwrapped env.
_ENV_SKIP = frozenset({"action_space", "observation_space", "spec", "metadata", "render_mode", "_ezpickle_args",
                       "_ezpickle_kwargs"})  # fmt: skip


class EnvCopier(ABC):
    """Makes copies of live envs of one kind and takes back the ones no longer held.

    Args:
        make: builds a new env like the ones copied (the backend's factory).
    """

    def __init__(self, make: Callable[[], gymnasium.Env]) -> None:
        self.make = make

    def new(self) -> gymnasium.Env:
        """A new env from ``make``, ready to be copied (every env the backend steps comes from here)."""
        return self.make()

    @abstractmethod
    def copy(self, env: gymnasium.Env) -> gymnasium.Env:
        """A new env object in ``env``'s exact state: stepping both with the same actions gives the same outputs."""

    @abstractmethod
    def recycle(self, env: gymnasium.Env) -> None:
        """``env`` (a copy or an env from ``make``) is no longer held by anyone."""

    def close(self) -> None:
        """Close every env this copier still keeps."""


class DeepCopier(EnvCopier):
    """Plain-Python envs: ``copy.deepcopy`` of the whole stack is the real state."""

    def copy(self, env: gymnasium.Env) -> gymnasium.Env:
        return copy.deepcopy(env)

    def recycle(self, env: gymnasium.Env) -> None:
        env.close()


class PooledCopier(EnvCopier):
    """Copies the state into a released env object (or a new one): the simulator by its API, layers by attribute."""

    #: Attributes of the unwrapped env that hold the simulator (copied by ``copy_simulator``).
    native: frozenset[str] = frozenset()

    def __init__(self, make: Callable[[], gymnasium.Env]) -> None:
        super().__init__(make)
        self._free: list[gymnasium.Env] = []

    @abstractmethod
    def copy_simulator(self, src: gymnasium.Env, dst: gymnasium.Env) -> None:
        """Copy the simulator state of unwrapped ``src`` into unwrapped ``dst``."""

    def copy(self, env: gymnasium.Env) -> gymnasium.Env:
        dst = self._free.pop() if self._free else self.new()
        try:
            self.copy_into(env, dst)
        except BaseException:
            dst.close()
            raise
        return dst

    def copy_into(self, src: gymnasium.Env, dst: gymnasium.Env) -> None:
        """Make ``dst`` (built by the same factory) a copy of ``src``."""
        src_layers, dst_layers = layers(src), layers(dst)
        if [type(x) for x in src_layers] != [type(x) for x in dst_layers]:
            raise RuntimeError(f"cannot copy {src} into {dst}: their wrapper stacks differ")
        src_env, dst_env = src_layers[-1], dst_layers[-1]
        self.copy_simulator(src_env, dst_env)
        memo = {id(s): d for s, d in zip(src_layers, dst_layers, strict=True)}
        for key in self.native:
            memo[id(getattr(src_env, key))] = getattr(dst_env, key)
        for s, d in zip(src_layers[:-1], dst_layers[:-1], strict=True):
            copy_attributes(s, d, _WRAPPER_SKIP, memo)
        copy_attributes(src_env, dst_env, _ENV_SKIP | self.native, memo)

    def recycle(self, env: gymnasium.Env) -> None:
        self._free.append(env)

    def close(self) -> None:
        for env in self._free:
            env.close()
        self._free.clear()


class MujocoCopier(PooledCopier):
    """Gymnasium's MuJoCo envs (``MujocoEnv``): ``mj_copyData`` copies the whole ``MjData``."""

    native = frozenset({"model", "data", "mujoco_renderer"})

    def copy_simulator(self, src: gymnasium.Env, dst: gymnasium.Env) -> None:
        import mujoco

        mujoco.mj_copyData(dst.data, dst.model, src.data)


class AleCopier(PooledCopier):
    """ale-py's ``AtariEnv``: the emulator state with its RNG through ``cloneState``, plus the held sticky action
    (``snapshot_ale``)."""

    native = frozenset({"ale"})

    def new(self) -> gymnasium.Env:
        env = self.make()
        track_sticky(env.unwrapped)
        return env

    def copy_simulator(self, src: gymnasium.Env, dst: gymnasium.Env) -> None:
        copy_ale(src.ale, dst.ale)


def layers(env: gymnasium.Env) -> list[gymnasium.Env]:
    """``env``'s wrapper stack, outermost first, ending with the unwrapped env."""
    out = [env]
    while isinstance(env, gymnasium.Wrapper):
        env = env.env
        out.append(env)
    return out


def copier_class(env: gymnasium.Env) -> type[EnvCopier] | None:
    """The copier for envs like ``env`` (a probe env), or None when its state cannot be copied (an EzPickle env
    that is neither MuJoCo nor ALE)."""
    inner = env.unwrapped
    if _is_instance(getattr(inner, "ale", None), "ale_py", "ALEInterface"):
        return AleCopier
    if _is_instance(getattr(inner, "data", None), "mujoco", "MjData") and _is_instance(
        getattr(inner, "model", None), "mujoco", "MjModel"
    ):
        return MujocoCopier
    if any(isinstance(layer, EzPickle) for layer in layers(env)):
        return None
    return DeepCopier


def _is_instance(value: Any, module: str, name: str) -> bool:
    """Whether ``value`` is ``module.name`` (without importing ``module``: an object of it means it is loaded)."""
    mod = sys.modules.get(module)
    return mod is not None and isinstance(value, getattr(mod, name))


def copy_attributes(src: object, dst: object, skip: frozenset[str], memo: dict[int, Any]) -> None:
    """Give ``dst`` a copy of each instance attribute of ``src`` not in ``skip`` (``memo``: as ``copy.deepcopy``)."""
    s, d = vars(src), vars(dst)
    for key, value in s.items():
        if key not in skip:
            d[key] = _copy_value(value, d.get(key), memo)
    for key in [k for k in d if k not in s and k not in skip]:
        del d[key]


def _copy_value(value: Any, old: Any, memo: dict[int, Any]) -> Any:
    """A copy of ``value``; ``old`` (the target's current value) is reused for an RNG, the one costly case."""
    if type(value) in _ATOMS:
        return value
    if id(value) in memo:
        return memo[id(value)]
    if type(value) is np.ndarray:
        new = value.copy()
    elif (
        isinstance(value, np.random.Generator)
        and isinstance(old, np.random.Generator)
        and old is not value
        and type(old.bit_generator) is type(value.bit_generator)
    ):  # a deep copy of a Generator costs ~30 us, setting the state ~3 us
        old.bit_generator.state = value.bit_generator.state
        new = old
    else:
        return copy.deepcopy(value, memo)
    memo[id(value)] = new
    return new
