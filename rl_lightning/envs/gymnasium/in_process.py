"""The in-process Gymnasium backend: the only one that can snapshot, via a registry of env copies.

The ``state`` of this env is a TensorDict with one key, ``snapshot``: int64 ids into a registry of live
Gymnasium env instances owned by the adapter. Stepping with ``inplace=False`` copies each env's real state
(simulator, RNGs and every wrapper's own state; ``snapshot.py``) into a new id before stepping, so the input
state stays valid and stepping the same snapshot twice with the same action gives identical outputs.
``inplace=True`` steps the registered envs themselves (the collector's fast path). Plain-Python envs are
deep-copied; MuJoCo and ALE envs are copied through the simulator's state API into an env object released
earlier (a pool), so a snapshot costs about one env step. An EzPickle env of another kind (Box2D, a user's)
cannot be copied: ``can_snapshot`` is False for it and search refuses it in one line.

Every id a caller obtains (``reset_state``, ``step_state(inplace=False)``, ``snapshot``) must be freed
with ``release``; ``live_count`` makes leaks observable and ``close`` frees everything.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.gymnasium.atari_wrappers import game_columns
from rl_lightning.envs.gymnasium.backend import GymnasiumBackend, draw_seeds, step_output
from rl_lightning.envs.gymnasium.render import RgbArrayRendering
from rl_lightning.envs.gymnasium.snapshot import EnvCopier, copier_class
from rl_lightning.envs.gymnasium.spaces import gym_actions, obs_tensor, stack_obs
from rl_lightning.envs.gymnasium.wrappers import ClassConfig
from rl_lightning.errors import ConfigError, EnvError

SNAPSHOT = "snapshot"


class GymnasiumEnv(RgbArrayRendering, GymnasiumBackend):
    """A Gymnasium env stepped one copy at a time in this process, with snapshots (SPO's search needs them).

    ``terminated`` and ``truncated`` come straight from Gymnasium (``gymnasium.make`` adds the ``TimeLimit``
    wrapper that truncates). Finished envs are reset from their own ``np_random``, so a snapshot fully
    determines its future; the ``generator`` only seeds new envs in ``reset_state``. Continuous actions are
    clipped to the Box bounds before stepping. Outputs are torch tensors on the state's device.

    Args:
        env_id: a ``gymnasium.make`` id (``"CartPole-v1"``), ``"package.module:EnvId"`` (imports the module
            that registers it), or an id registered by an installed package's ``gymnasium.envs`` entry point.
        env_kwargs: extra keyword arguments for ``gymnasium.make`` (e.g. ``max_episode_steps``).
        env_class: instead of ``env_id``: a ``gymnasium.Env`` subclass and its ``init_args``.
        wrappers: wrapper classes with their ``init_args``, applied to each env in order (first = innermost).
        atari_preset: an Atari preset for ``env_id`` (the game); see ``GymnasiumBackend``.
        atari_eval: the preset's evaluation form (whole games, raw scores); ``fresh`` (the eval env) sets it.
    """

    state_is_tensors = False  # the state is snapshot ids into a registry of Python env objects

    def __init__(
        self,
        env_id: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        env_class: ClassConfig | None = None,
        wrappers: list[ClassConfig] | None = None,
        *,
        atari_preset: str | None = None,
        atari_eval: bool = False,
    ) -> None:
        super().__init__(env_id, env_kwargs, env_class, wrappers, atari_preset=atari_preset, atari_eval=atari_eval)
        self.env_kwargs = self.factory.env_kwargs
        self._envs: dict[int, gymnasium.Env] = {}
        self._obs: dict[int, np.ndarray] = {}
        self._next_id = 0
        self._ended: set[int] = set()  # next-step mode: ids whose last step ended (reset on their next step)

    def _read_probe(self, probe: gymnasium.Env) -> None:
        """Choose how to copy envs like ``probe``; none (an uncopyable EzPickle env) turns snapshots off."""
        kind = copier_class(probe)
        self._copier: EnvCopier | None = None if kind is None else kind(self.factory)
        self.can_snapshot = kind is not None
        self.snapshot_refusal = None if kind else (
            f"GymnasiumEnv({self.factory.name!r}) cannot copy its env's state: {type(probe.unwrapped).__name__} is an "
            "EzPickle env, whose copies restart from its constructor arguments; GymnasiumEnv snapshots plain-Python "
            "envs, Gymnasium's MuJoCo envs and ALE Atari envs"
        )  # fmt: skip

    @property
    def live_count(self) -> int:
        """Number of env instances held by callers (ids not yet released; 0 after ``close``).

        Released copies kept for reuse are not counted."""
        return len(self._envs)

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

    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        """Make ``num`` new env instances, each seeded from ``generator``, and register them."""
        ids: list[int] = []
        for index, seed in enumerate(draw_seeds(num, generator)):
            env = self.factory() if self._copier is None else self._copier.new()
            try:
                obs, _ = env.reset(seed=int(seed))
            except Exception as err:
                env.close()
                self.release(self._state(ids, None))
                raise self._env_error(index, num, "reset", err) from err
            ids.append(self._register(env, obs))
        return self._state(ids, generator.device)

    def _env_error(self, index: int, num: int, call: str, err: Exception) -> EnvError:
        """The one-line error for a Gymnasium env that raised: its name, its index in the batch, what it raised."""
        return EnvError(self.factory.name, index, num, f"raised {type(err).__name__} in {call}(): {err}")

    def observe(self, state: TensorDict) -> TensorDict:
        """Return the current observation of each snapshot (dtype kept; a ``Dict`` space as nested keys)."""
        obs = stack_obs([self._current_obs(sid) for sid in self._ids(state)], self._obs_space)
        return TensorDict({keys.OBS: obs_tensor(obs, self._obs_space, state.device)}, batch_size=state.batch_size)

    @staticmethod
    def _ids(state: TensorDict) -> list[int]:
        return state[SNAPSHOT].tolist()

    def _copy(self, sid: int) -> int:
        if self._copier is None:
            raise ConfigError(f"{self.snapshot_refusal}; this needs a copy (search, or stepping a snapshot)")
        new = self._register(self._copier.copy(self._env(sid)), self._current_obs(sid))
        if sid in self._ended:  # next-step mode: the copy is due for its reset too
            self._ended.add(new)
        return new

    def snapshot(self, state: TensorDict) -> TensorDict:
        """Clone the envs behind ``state`` into new ids (e.g. a search root); release the result when done."""
        return self._state([self._copy(sid) for sid in self._ids(state)], state.device)

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        """Step every snapshot once; see ``TorchEnv.step_state`` and the class docstring for the semantics."""
        ids = self._ids(state)
        next_ids = self._inplace_ids(ids) if inplace else [self._copy(sid) for sid in ids]
        actions = gym_actions(action, self._action_space)
        first = [sid in self._ended for sid in next_ids]  # next-step mode: the rows this step resets
        rows = []
        for index, (sid, act) in enumerate(zip(next_ids, actions, strict=True)):
            try:
                rows.append(self._step_one(sid, act))
            except Exception as err:
                if not inplace:  # do not leak the copies taken for this step
                    self.release(self._state(next_ids, None))
                raise self._env_error(index, len(next_ids), "step", err) from err
        obs, final_obs, reward, terminated, truncated, infos = zip(*rows, strict=True)
        batch = (stack_obs(obs, self._obs_space), stack_obs(final_obs, self._obs_space), np.asarray(reward),
                 np.asarray(terminated), np.asarray(truncated))  # fmt: skip
        games = None if self.atari is None else game_columns(infos)
        out = step_output(batch, self._obs_space, state.batch_size, state.device, games)
        if self.next_step:
            out[keys.IS_FIRST] = torch.tensor(first, device=state.device)
        if inplace and next_ids == ids:
            return state, out
        return self._state(next_ids, state.device), out

    def _inplace_ids(self, ids: list[int]) -> list[int]:
        """Keep each id once; a row repeating an earlier row's id (an expanded state) gets its own copy."""
        seen: set[int] = set()
        out = []
        for sid in ids:
            out.append(self._copy(sid) if sid in seen else sid)
            seen.add(sid)
        return out

    def _step_one(self, sid: int, action: np.ndarray) -> tuple[Any, Any, float, bool, bool, dict[str, Any]]:
        env = self._env(sid)
        if self.next_step and sid in self._ended:  # next_step_autoreset: the reset tick ignores the action
            self._ended.discard(sid)
            obs = self._obs[sid] = env.reset()[0]
            return obs, obs, 0.0, False, False, {"game_score": 0.0, "game_over": False}  # (GameScore's keys)
        final_obs, reward, terminated, truncated, info = env.step(action)
        if self.next_step and (terminated or truncated):
            self._ended.add(sid)
        obs = env.reset()[0] if (terminated or truncated) and not self.next_step else final_obs
        self._obs[sid] = obs
        return obs, final_obs, float(reward), bool(terminated), bool(truncated), info

    def _frames(self, state: TensorDict) -> list[Any]:
        return [self._env(sid).render() for sid in self._ids(state)]

    def release(self, state: TensorDict) -> None:
        """Free the envs behind ``state``; ids already released (or unknown) are ignored."""
        for sid in self._ids(state):
            env = self._envs.pop(sid, None)
            self._obs.pop(sid, None)
            self._ended.discard(sid)
            if env is not None:
                self._recycle(env)

    def _recycle(self, env: gymnasium.Env) -> None:
        if self._copier is None:
            env.close()
        else:
            self._copier.recycle(env)

    def close(self) -> None:
        """Release and close every env in the registry, and the released ones kept for reuse."""
        for env in self._envs.values():
            env.close()
        self._envs.clear()
        self._obs.clear()
        self._ended.clear()
        if self._copier is not None:
            self._copier.close()
