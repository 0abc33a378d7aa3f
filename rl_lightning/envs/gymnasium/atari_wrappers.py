"""An Atari preset on a single Gymnasium env: ``AtariPreprocessing`` + ``FrameStackObservation`` + what they lack.

Gymnasium's ``AtariPreprocessing`` does the no-ops, frame skip with max-pool, resize and grayscale; its own
``terminal_on_life_loss`` restarts the whole game after a life loss, which is not the baselines protocol, so life
loss is ``EpisodicLife`` here (the game goes on, as EnvPool's ``episodic_life`` and ale-py's ``life_loss_info``).
Order, innermost first, as openai/baselines: preprocessing, the game's raw score, episodic life, FIRE at reset,
reward sign, channels first, frame stack.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

from rl_lightning.envs.gymnasium.atari import AtariPreset


class GameScore(gymnasium.Wrapper):
    """The raw score of the whole game (all lives, unclipped), in ``info["game_score"]`` / ``info["game_over"]``.

    It sits below life-loss episodes and reward clipping (as CleanRL's ``RecordEpisodeStatistics``), so it sees
    every frame of the game, the no-op and FIRE steps of the wrappers above included.
    """

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self.score = 0.0

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.score += float(reward)
        info = {**info, "game_score": self.score, "game_over": terminated or truncated}
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.score = 0.0
        return self.env.reset(**kwargs)


def game_columns(infos: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """``(game_score, game_over)`` per row from the step infos of envs wrapped with ``GameScore``."""
    score = np.asarray([info["game_score"] for info in infos], dtype=np.float32)
    return score, np.asarray([info["game_over"] for info in infos], dtype=bool)


class EpisodicLife(gymnasium.Wrapper):
    """A life loss ends the episode (``terminated``); the next ``reset`` only plays on (one no-op step).

    The game itself is reset only after a real game over or truncation.
    """

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        lost = 0 < lives < self.lives
        self.lives = lives
        return obs, reward, terminated or lost, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.game_over = False
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireReset(gymnasium.Wrapper):
    """Press FIRE (then UP) after each reset, for games that wait for it (openai/baselines ``FireResetEnv``)."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class ClipRewardSign(gymnasium.RewardWrapper):
    """Rewards clipped to their sign: -1, 0 or +1."""

    def reward(self, reward: Any) -> float:
        return float(np.sign(reward))


class ChannelsFirst(gymnasium.ObservationWrapper):
    """``(H, W, C)`` images to ``(C, H, W)``, the layout of the project's image encoders."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        h, w, c = space.shape
        self.observation_space = gymnasium.spaces.Box(0, 255, (c, h, w), dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(observation.transpose(2, 0, 1))


def wrap_atari(env: gymnasium.Env, preset: AtariPreset) -> gymnasium.Env:
    """``env`` (made with ``preset.gym_kwargs()``) with the preset's processing; observations ``preset.obs_shape``."""
    env = AtariPreprocessing(
        env, noop_max=preset.noop_max, frame_skip=preset.frame_skip, screen_size=preset.size,
        terminal_on_life_loss=False, grayscale_obs=preset.grayscale,
    )  # fmt: skip
    env = GameScore(env)
    if preset.life_loss:
        env = EpisodicLife(env)
    if preset.fire_reset and env.unwrapped.get_action_meanings()[1] == "FIRE":
        env = FireReset(env)
    if preset.clips:
        env = ClipRewardSign(env)
    if not preset.grayscale:
        env = ChannelsFirst(env)
    if preset.stack > 1:
        env = FrameStackObservation(env, preset.stack)
    if not preset.grayscale and preset.stack > 1:
        env = gymnasium.wrappers.ReshapeObservation(env, preset.obs_shape)
    return env
