"""Any ``gymnasium.make`` id behind the functional ``TorchEnv`` contract, via a registry of env copies.

The ``state`` of this env is a TensorDict with one key, ``snapshot``: int64 ids into a registry of live
Gymnasium env instances owned by the adapter. Stepping with ``inplace=False`` deep-copies each env (its
``np_random`` included) into a new id before stepping, so the input state stays valid and stepping the
same snapshot twice with the same action gives identical outputs. ``inplace=True`` steps the registered
envs themselves (the collector's fast path).

Every id a caller obtains (``reset_state``, ``step_state(inplace=False)``, ``snapshot``) must be freed
with ``release``; ``live_count`` makes leaks observable and ``close`` frees everything.
"""

from __future__ import annotations

import copy
import difflib
import importlib
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import EnvSpec, TorchEnv
from rl_lightning.errors import ConfigError

SNAPSHOT = "snapshot"


def _check_env_id(env_id: str) -> None:
    """Raise a one-line ``ConfigError`` unless ``env_id`` names a registered Gymnasium id.

    ``"package.module:EnvId"`` follows ``gymnasium.make``: the module is imported first (it registers the id).
    A module that does not import, and an id that is still not registered, are named with the fix; close
    matches from the registry are listed.
    """
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except Exception as err:  # any failure while importing the user's module is a config error
            detail = " ".join(f"{type(err).__name__}: {err}".split())
            raise ConfigError(
                f"env_id={env_id!r}: module {module!r} does not import ({detail}); install it or fix the "
                f"module path before ':'"
            ) from None
    try:
        gymnasium.spec(name)
    except gymnasium.error.Error as err:
        matches = difflib.get_close_matches(name, list(gymnasium.envs.registry), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(repr(m) for m in matches)}? " if matches else ""
        where = f"module {module!r} did not register it" if module else "not in gymnasium.envs.registry"
        detail = " ".join(str(err).split())
        raise ConfigError(
            f"env_id={env_id!r}: unknown env id {name!r}, {where} ({detail}); {hint}name a registered id, or "
            f"'package.module:EnvId' to import the module that registers it"
        ) from None


def _spec_from(env_id: str, env: gymnasium.Env) -> EnvSpec:
    """Build an ``EnvSpec`` from the spaces, or raise a ``ValueError`` that lists what is supported."""
    obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(obs_space, spaces.Box):
        raise ConfigError(
            f"GymnasiumEnv({env_id!r}): observation space {obs_space} is not supported; "
            "supported: Box observations (cast to float32)"
        )
    limit = env.spec.max_episode_steps if env.spec is not None else None
    common = {"name": env_id, "obs_shape": tuple(obs_space.shape), "max_episode_steps": int(limit or 0)}
    if isinstance(act_space, spaces.Discrete):
        return EnvSpec(discrete=True, num_actions=int(act_space.n), **common)
    if isinstance(act_space, spaces.Box):
        return EnvSpec(
            discrete=False,
            action_shape=tuple(act_space.shape),
            action_low=tuple(float(v) for v in act_space.low.reshape(-1)),
            action_high=tuple(float(v) for v in act_space.high.reshape(-1)),
            **common,
        )
    raise ConfigError(
        f"GymnasiumEnv({env_id!r}): action space {act_space} is not supported; supported: Discrete(n) and Box"
    )


class GymnasiumEnv(TorchEnv):
    state_is_tensors = False  # the state is snapshot ids into a registry of Python env objects

    """Wrap a Gymnasium env id as a batched functional env with same-step auto-reset.

    ``terminated`` and ``truncated`` come straight from Gymnasium (``gymnasium.make`` adds the ``TimeLimit``
    wrapper that truncates). Finished envs are reset from their own ``np_random``, so a snapshot fully
    determines its future; the ``generator`` only seeds new envs in ``reset_state``. Continuous actions are
    clipped to the Box bounds before stepping. Outputs are torch tensors on the state's device.

    Args:
        env_id: a ``gymnasium.make`` id, e.g. ``"CartPole-v1"``.
        env_kwargs: extra keyword arguments for ``gymnasium.make``.
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
        _check_env_id(env_id)
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        probe = self._make()
        try:
            self.spec = _spec_from(env_id, probe)
            self._action_space = probe.action_space
        finally:
            probe.close()
        self._envs: dict[int, gymnasium.Env] = {}
        self._obs: dict[int, np.ndarray] = {}
        self._next_id = 0

    @property
    def live_count(self) -> int:
        """Number of env instances currently held in the registry (0 after ``close``)."""
        return len(self._envs)

    def _make(self) -> gymnasium.Env:
        return gymnasium.make(self.env_id, **self.env_kwargs)

    def _register(self, env: gymnasium.Env, obs: np.ndarray) -> int:
        sid = self._next_id
        self._next_id += 1
        self._envs[sid] = env
        self._obs[sid] = obs
        return sid

    def _env(self, sid: int) -> gymnasium.Env:
        if sid not in self._envs:
            raise RuntimeError(
                f"GymnasiumEnv({self.env_id!r}): snapshot id {sid} was released or never existed; "
                "step or observe only states that are still live"
            )
        return self._envs[sid]

    def _current_obs(self, sid: int) -> np.ndarray:
        self._env(sid)  # raises on a released id
        return self._obs[sid]

    def _state(self, ids: list[int], device: torch.device | None) -> TensorDict:
        snap = torch.tensor(ids, dtype=torch.int64, device=device)
        return TensorDict({SNAPSHOT: snap}, batch_size=[len(ids)], device=device)

    def _to_gym_action(self, action: np.ndarray) -> Any:
        space = self._action_space
        if isinstance(space, spaces.Discrete):
            return int(action) + int(space.start)
        return np.clip(action.reshape(space.shape), space.low, space.high).astype(space.dtype)

    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        """Make ``num`` new env instances, each seeded from ``generator``, and register them."""
        seeds = torch.randint(0, 2**31 - 1, (num,), generator=generator, device=generator.device).tolist()
        ids = []
        for seed in seeds:
            env = self._make()
            obs, _ = env.reset(seed=int(seed))
            ids.append(self._register(env, obs))
        return self._state(ids, generator.device)

    def observe(self, state: TensorDict) -> TensorDict:
        """Return the current float32 observation of each snapshot."""
        obs = np.stack([self._current_obs(sid) for sid in self._ids(state)])
        return TensorDict(
            {keys.OBS: torch.as_tensor(obs, dtype=torch.float32).to(state.device)}, batch_size=state.batch_size
        )

    @staticmethod
    def _ids(state: TensorDict) -> list[int]:
        return state[SNAPSHOT].tolist()

    def _copy(self, sid: int) -> int:
        return self._register(copy.deepcopy(self._env(sid)), self._current_obs(sid))

    def snapshot(self, state: TensorDict) -> TensorDict:
        """Clone the envs behind ``state`` into new ids (e.g. a search root); release the result when done."""
        return self._state([self._copy(sid) for sid in self._ids(state)], state.device)

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        """Step every snapshot once; see ``TorchEnv.step_state`` and the class docstring for the semantics."""
        ids = self._ids(state)
        next_ids = self._inplace_ids(ids) if inplace else [self._copy(sid) for sid in ids]
        actions = action.detach().cpu().numpy()
        try:
            rows = [self._step_one(sid, a) for sid, a in zip(next_ids, actions, strict=True)]
        except Exception:
            if not inplace:  # do not leak the copies taken for this step
                self.release(self._state(next_ids, None))
            raise
        obs, final_obs, reward, terminated, truncated = (np.stack(col) for col in zip(*rows, strict=True))
        device = state.device
        done = torch.as_tensor(terminated | truncated, device=device)
        out = TensorDict(
            {
                keys.OBS: torch.as_tensor(obs, dtype=torch.float32).to(device),
                keys.FINAL_OBS: torch.as_tensor(final_obs, dtype=torch.float32).to(device),
                keys.REWARD: torch.as_tensor(reward, dtype=torch.float32).to(device),
                keys.TERMINATED: torch.as_tensor(terminated, device=device),
                keys.TRUNCATED: torch.as_tensor(truncated, device=device),
                keys.IS_FIRST: done,
            },
            batch_size=state.batch_size,
        )
        if inplace and next_ids == ids:
            return state, out
        return self._state(next_ids, device), out

    def _inplace_ids(self, ids: list[int]) -> list[int]:
        """Keep each id once; a row repeating an earlier row's id (an expanded state) gets its own copy."""
        seen: set[int] = set()
        out = []
        for sid in ids:
            out.append(self._copy(sid) if sid in seen else sid)
            seen.add(sid)
        return out

    def _step_one(self, sid: int, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, bool, bool]:
        env = self._env(sid)
        final_obs, reward, terminated, truncated, _ = env.step(self._to_gym_action(action))
        obs = env.reset()[0] if terminated or truncated else final_obs
        self._obs[sid] = obs
        return obs, final_obs, float(reward), bool(terminated), bool(truncated)

    def release(self, state: TensorDict) -> None:
        """Free the envs behind ``state``; ids already released (or unknown) are ignored."""
        for sid in self._ids(state):
            env = self._envs.pop(sid, None)
            self._obs.pop(sid, None)
            if env is not None:
                env.close()

    def close(self) -> None:
        """Release and close every env in the registry."""
        for env in self._envs.values():
            env.close()
        self._envs.clear()
        self._obs.clear()
