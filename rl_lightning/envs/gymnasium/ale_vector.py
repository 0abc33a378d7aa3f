"""ale-py's C++ ``AtariVectorEnv`` behind the env contract (optional: ``pip install -e ".[atari]"``).

It resets in ``SAME_STEP`` mode natively and returns ``final_obs`` as a dense ``uint8`` array, so it needs no
adapter logic beyond the preset's options (``AtariPreset.ale_vector_kwargs``). It only runs under an Atari
preset: its observations are always preprocessed in C++. Sub-env ``i`` is seeded with the ``i``-th seed drawn
from the run's generator; ALE's own random streams mean its episodes are not the Gymnasium backends' for the
same seeds. RGB frames come as ``(stack, H, W, 3)`` and are laid out channels first, ``(3 * stack, H, W)``.

Frame stacks: ale-py pads the stack of a new episode with black frames, where Gymnasium's
``FrameStackObservation`` (and EnvPool, and openai/baselines' ``FrameStack``) repeat the episode's first frame.
The adapter counts each env's frames since its reset and repeats the first frame the same way, so that with the
same actions and seeds the frames equal the Gymnasium backends' (tests/test_atari.py checks it).
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
            ``baselines``, ``ALE/Breakout-v5`` for ``machado`` and ``atari100k``).
        atari_preset: ``"baselines"``, ``"machado"`` or ``"atari100k"`` (``rl_lightning.envs.gymnasium.atari``).
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
            action_set = list(probe.ale.get_action_set())
        finally:
            probe.close()
        from ale_py import Action  # after import_ale: its one-line error when ale-py is missing

        # FIRE at each new life (baselines training), in place of the row's next action: see ``_count_games``
        fire = self.atari.life_loss and self.atari.fire_reset and Action.FIRE in action_set
        self._fire_action = action_set.index(Action.FIRE) if fire else None
        self._obs_space = gymnasium.spaces.Box(0, 255, self.atari.obs_shape, dtype=np.uint8)
        limit = self.atari.max_episode_frames // self.atari.frame_skip
        self.spec = env_spec(self._id, self._obs_space, self._action_space, limit)
        self._num = None
        self._obs = None
        self._venv: Any = None
        self._age: np.ndarray | None = None  # frames since each env's reset, capped at the stack size
        self._episode_frames: np.ndarray | None = None  # ALE's frame counter per env (falls at a real reset)
        self._score: np.ndarray | None = None  # each env's raw score since its game started
        self._fire_next: np.ndarray | None = None  # rows that lost a life last step: their next action is FIRE

    @property
    def env_id(self) -> str:
        return self._id

    def _unstarted(self) -> dict[str, Any]:
        return {**super()._unstarted(), "_age": None, "_episode_frames": None, "_score": None, "_fire_next": None}

    def _make(self, num: int) -> Any:
        from ale_py.vector_env import AtariVectorEnv

        return AtariVectorEnv(
            snake_case(self.game), num, num_threads=self.num_threads,
            autoreset_mode="NextStep" if self.next_step else "SameStep",  # next_step_autoreset
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
        obs, info = self._venv.reset(seed=np.asarray(seeds, dtype=np.int64))
        self._age = np.ones(len(seeds), dtype=np.int64)
        self._episode_frames = np.asarray(info["episode_frame_number"])
        self._score = np.zeros(len(seeds), dtype=np.float64)
        self._fire_next = np.zeros(len(seeds), dtype=bool)
        return self._repeat_first_frame(self._channels_first(obs), self._age)

    def _step_all(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        actions = np.asarray(actions)
        if self._fire_action is not None:
            actions = np.where(self._fire_next, self._fire_action, actions)
        obs, reward, terminated, truncated, info = self._venv.step(actions)
        done = np.logical_or(terminated, truncated)
        # A life loss (baselines training) is ``terminated`` but ale-py plays on: the returned frames are the
        # terminal ones and ``info["final_obs"]`` holds nothing for that row. Only a real reset restarts the
        # episode's frame counter.
        frames = np.asarray(info["episode_frame_number"])
        restarted = done & (frames < self._episode_frames)
        self._episode_frames = frames
        reward = self._count_games(reward, terminated, truncated, restarted, np.asarray(info["lives"]))
        if self.next_step:
            return self._next_step_rows(obs, reward, terminated, truncated)
        ended_age = np.minimum(self._age + 1, self.atari.stack)
        self._age = np.where(done, 1, ended_age)  # a new stack after any episode end, as Gymnasium's reset refills it
        raw = self._channels_first(obs)
        final_obs = self._repeat_first_frame(raw.copy(), ended_age)
        if restarted.any():
            final = self._repeat_first_frame(self._channels_first(info["final_obs"]), ended_age)
            final_obs = np.where(restarted[:, None, None, None], final, final_obs)
        return self._repeat_first_frame(raw, self._age), final_obs, reward, terminated, truncated

    def _count_games(
        self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, restarted: np.ndarray, lives: Any
    ) -> np.ndarray:
        """Keep each game's raw score (``_games``) and the rows to FIRE next; returns the preset's reward.

        ale-py's ``life_loss_info`` only reports a life loss, so the next life's FIRE (openai/baselines' FIRE at
        every reset) replaces that row's next action: ale-py cannot step one row alone, and EnvPool's play-on
        step after a life loss ignores the action the same way. Rewards are clipped here, not in C++, so the raw
        score stays known.
        """
        # next-step mode resets nothing inside the step: a game over is then the frame limit or the last life
        last_life = terminated & ((lives == 0) | (not self.atari.life_loss))
        over = truncated | last_life if self.next_step else restarted
        self._fire_next = terminated & ~over
        self._score += reward
        self._games = (self._score.copy(), over)
        self._score[over] = 0.0
        return np.sign(reward) if self.atari.clips else reward

    def _next_step_rows(
        self, obs: np.ndarray, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Next-step autoreset (``next_step_autoreset``): ale-py reset the rows that ended last step (``_ended``),
        so their stacks start again; nothing is reset inside this step (``final_obs`` is ``obs``)."""
        assert self._age is not None
        assert self._ended is not None
        self._age = np.where(self._ended, 1, np.minimum(self._age + 1, self.atari.stack))
        frames = self._repeat_first_frame(self._channels_first(obs), self._age)
        return frames, frames, reward, terminated, truncated

    def _repeat_first_frame(self, obs: np.ndarray, age: np.ndarray) -> np.ndarray:
        """Replace the black padding of stacks younger than the stack size by their episode's first frame."""
        stack = self.atari.stack
        young = np.flatnonzero(age < stack)
        if young.size == 0:
            return obs
        frames = obs.reshape(obs.shape[0], stack, -1, *obs.shape[2:])  # [n, stack, channels, H, W]
        for row in young:
            first = stack - int(age[row])
            frames[row, :first] = frames[row, first]
        return obs
