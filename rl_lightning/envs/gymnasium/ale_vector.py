"""ale-py's C++ ``AtariVectorEnv`` behind the env contract (optional: ``pip install 'rl_lightning[atari]'``).

It resets in ``SAME_STEP`` mode natively and returns ``final_obs`` as a dense ``uint8`` array, so it needs no
adapter logic beyond the preset's options (``AtariPreset.ale_vector_kwargs``). It only runs under an Atari
preset: its observations are always preprocessed in C++. Sub-env ``i`` is seeded with the ``i``-th seed drawn
from the run's generator; ALE's own random streams mean its episodes are not the Gymnasium backends' for the
same seeds. RGB frames come as ``(stack, H, W, 3)`` and are laid out channels first, ``(3 * stack, H, W)``.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

from rl_lightning.envs.gymnasium.atari import game_name, import_ale, named_preset, snake_case
from rl_lightning.envs.gymnasium.backend import HeldVectorEnv
from rl_lightning.envs.gymnasium.spaces import env_spec


class AleVectorEnv(HeldVectorEnv):
    """An Atari game stepped by ale-py's ``AtariVectorEnv`` thread pool; no snapshots.

    Args:
        env_id: the game: ``Breakout``, or its id under the preset (``BreakoutNoFrameskip-v4`` for
            ``baselines``, ``ALE/Breakout-v5`` for ``machado``).
        atari_preset: ``"baselines"`` or ``"machado"`` (``rl_lightning.envs.gymnasium.atari``).
        atari_eval: the preset's evaluation form (whole games, raw scores); ``fresh`` (the eval env) sets it.
        num_threads: worker threads (0: ale-py's default).
    """

    def __init__(
        self, env_id: str, *, atari_preset: str = "baselines", atari_eval: bool = False, num_threads: int = 0
    ) -> None:  # deliberately not GymnasiumBackend.__init__: no Gymnasium factory, the env is all C++
        import_ale(f"{type(self).__name__}(env_id={env_id!r})")
        self.atari = named_preset(atari_preset, atari_eval)
        self.game = game_name(env_id, self.atari, self.atari.gym_id("{game}"))
        self.num_threads = num_threads
        self._id = self.atari.gym_id(self.game)
        probe = self._make(1)
        try:
            self._action_space = probe.single_action_space
        finally:
            probe.close()
        self._obs_space = gymnasium.spaces.Box(0, 255, self.atari.obs_shape, dtype=np.uint8)
        limit = self.atari.max_episode_frames // self.atari.frame_skip
        self.spec = env_spec(self._id, self._obs_space, self._action_space, limit)
        self._num = None
        self._obs = None
        self._venv: Any = None

    @property
    def env_id(self) -> str:
        return self._id

    def _make(self, num: int) -> Any:
        from ale_py.vector_env import AtariVectorEnv

        return AtariVectorEnv(
            snake_case(self.game), num, num_threads=self.num_threads, autoreset_mode="SameStep",
            **self.atari.ale_vector_kwargs(),
        )  # fmt: skip

    def _channels_first(self, obs: np.ndarray) -> np.ndarray:
        if self.atari.grayscale:
            return obs
        n, stack, h, w, c = obs.shape
        return np.ascontiguousarray(obs.transpose(0, 1, 4, 2, 3)).reshape(n, stack * c, h, w)

    def _reset_all(self, seeds: list[int]) -> np.ndarray:
        if self._venv is None or self._venv.num_envs != len(seeds):
            self.close()
            self._venv = self._make(len(seeds))
        obs, _ = self._venv.reset(seed=np.asarray(seeds, dtype=np.int64))
        return self._channels_first(obs)

    def _step_all(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        obs, reward, terminated, truncated, info = self._venv.step(np.asarray(actions))
        obs = self._channels_first(obs)
        final_obs = obs
        if "final_obs" in info:  # dense over all rows; keep it only where an episode ended
            done = np.logical_or(terminated, truncated)[:, None, None, None]
            final_obs = np.where(done, self._channels_first(info["final_obs"]), obs)
        return obs, final_obs, reward, terminated, truncated
