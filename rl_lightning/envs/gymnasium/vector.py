"""Gymnasium's own ``SyncVectorEnv`` / ``AsyncVectorEnv`` behind the env contract, in ``SAME_STEP`` autoreset.

In ``SAME_STEP`` mode (Gymnasium >= 1.1) a finished env is reset inside the step that ends it: ``obs[i]`` is
already the next episode's first observation and the true last one is in ``info["final_obs"]``, an object
array (``None`` where nothing finished) with the mask ``info["_final_obs"]``; it is stacked densely into
``final_obs`` here. ``AsyncVectorEnv`` steps each env in its own process and returns observations through
shared memory (``final_obs`` comes back pickled). Sub-env ``i`` is seeded with the ``i``-th seed drawn from
the run's generator, exactly as the in-process backend seeds its envs, so both produce identical transitions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from tensordict import TensorDict

from rl_lightning.envs.gymnasium.backend import ENV_INDEX, HeldVectorEnv
from rl_lightning.envs.gymnasium.render import RgbArrayRendering
from rl_lightning.envs.gymnasium.spaces import with_final_obs
from rl_lightning.envs.gymnasium.wrappers import ClassConfig
from rl_lightning.errors import ConfigError

MODES = ("sync", "async")


class GymnasiumVectorEnv(RgbArrayRendering, HeldVectorEnv):
    """A Gymnasium env stepped by ``SyncVectorEnv`` (one process) or ``AsyncVectorEnv`` (one process per env).

    No snapshots (``can_snapshot`` is False): SPO needs ``rl_lightning.envs.GymnasiumEnv``.

    Args:
        env_id: a ``gymnasium.make`` id, ``"package.module:EnvId"``, or a plugin-registered id.
        env_kwargs: extra keyword arguments for ``gymnasium.make``.
        env_class: instead of ``env_id``: a ``gymnasium.Env`` subclass and its ``init_args``.
        wrappers: wrapper classes with their ``init_args``, applied to each env in order (first = innermost).
        atari_preset: an Atari preset for ``env_id`` (the game); see ``GymnasiumBackend``.
        atari_eval: the preset's evaluation form (whole games, raw scores); ``fresh`` (the eval env) sets it.
        mode: ``"sync"`` (``SyncVectorEnv``) or ``"async"`` (``AsyncVectorEnv``, subprocesses).
        shared_memory: async only: workers write observations into shared memory.
        context: async only: multiprocessing start method (``None``: the platform default).
    """

    def __init__(
        self,
        env_id: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        env_class: ClassConfig | None = None,
        wrappers: list[ClassConfig] | None = None,
        mode: str = "sync",
        shared_memory: bool = True,
        context: str | None = None,
        *,
        atari_preset: str | None = None,
        atari_eval: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"mode={mode!r} is not a Gymnasium vector mode; choose one of {list(MODES)}")
        super().__init__(env_id, env_kwargs, env_class, wrappers, atari_preset=atari_preset, atari_eval=atari_eval)
        self.mode = mode
        self.shared_memory = shared_memory
        self.context = context
        self._venv: VectorEnv | None = None

    def _make_vector(self, num: int) -> VectorEnv:
        fns = [self.factory] * num
        autoreset = AutoresetMode.NEXT_STEP if self.next_step else AutoresetMode.SAME_STEP  # next_step_autoreset
        if self.mode == "sync":
            return SyncVectorEnv(fns, autoreset_mode=autoreset)
        return AsyncVectorEnv(fns, shared_memory=self.shared_memory, context=self.context, autoreset_mode=autoreset)

    def _reset_all(self, seeds: list[int]) -> np.ndarray:
        if self._venv is None or self._venv.num_envs != len(seeds):
            self.close()
            self._venv = self._make_vector(len(seeds))
        obs, _ = self._venv.reset(seed=seeds)
        return obs

    def _step_all(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        assert self._venv is not None
        obs, reward, terminated, truncated, info = self._venv.step(actions)
        mask = np.asarray(info.get("_final_obs", np.zeros(len(reward), dtype=bool)))
        final_obs = with_final_obs(obs, info.get("final_obs", [None] * len(reward)), mask, self._obs_space)
        if self.atari is not None:
            self._games = _game_columns(info, np.logical_or(terminated, truncated))
        return obs, final_obs, reward, terminated, truncated

    def _frames(self, state: TensorDict) -> list[Any]:
        if self._venv is None:
            raise RuntimeError(f"GymnasiumVectorEnv({self.env_id!r}): render_rgb before reset_state")
        frames = self._venv.call("render")  # every sub-env renders; rows pick theirs by index
        return [frames[i] for i in state[ENV_INDEX].tolist()]


def _game_columns(info: dict[str, Any], done: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(game_score, game_over)`` per row (``atari_wrappers.GameScore``): in SAME_STEP a finished row's last-step
    info is in ``final_info`` (the top level then holds its reset info); in NEXT_STEP it is the top level."""
    final = info.get("final_info", {})
    columns = []
    for key in ("game_score", "game_over"):
        running = np.asarray(info.get(key, np.zeros(len(done))))
        ended = np.asarray(final[key]) if key in final else running
        columns.append(np.where(done, ended, running))
    return columns[0].astype(np.float32), columns[1].astype(bool)
