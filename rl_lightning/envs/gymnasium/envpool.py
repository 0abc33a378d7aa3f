"""EnvPool's C++ thread pool behind the env contract (optional: ``pip install -e ".[envpool]"``).

EnvPool autoresets on the *next* step (that step ignores the action; envs.md §2). To present same-step
autoreset, the done step's observation is kept as ``final_obs`` and the finished envs are reset at once with
EnvPool's partial reset (``reset(env_ids)``), whose observations replace theirs in ``obs``: one extra call
whenever some env finishes, and no step is wasted. Seeds are fixed when a pool is made, so ``reset_state``
makes a new pool with env ``i`` seeded by the ``i``-th seed drawn from the run's generator. EnvPool's
simulators use their own random streams, so its episodes are not Gymnasium's for the same seeds.

Its envs live in C++, so Python wrappers cannot wrap them: observation and action wrappers
(``gymnasium.ObservationWrapper`` / ``ActionWrapper`` subclasses such as ``ClipAction``, ``RescaleAction``,
``FilterObservation`` or a user's own) are applied per row to what goes in and out of the pool; any other
wrapper is refused (``TimeLimit``: use EnvPool's own ``max_episode_steps`` in ``env_kwargs``).
"""

from __future__ import annotations

import difflib
import warnings
from typing import Any

import gymnasium
import numpy as np

from rl_lightning.envs.gymnasium.atari import AtariPreset, game_name, named_preset
from rl_lightning.envs.gymnasium.backend import VectorBackend
from rl_lightning.envs.gymnasium.spaces import env_spec
from rl_lightning.envs.gymnasium.wrappers import ClassConfig, apply_wrappers, check_wrappers, class_spec
from rl_lightning.errors import ConfigError


def _import_envpool() -> Any:
    try:
        import envpool
    except ImportError as err:
        raise ConfigError(
            f'EnvPoolEnv needs the envpool package ({err}); install the extra: pip install -e ".[envpool]"'
        ) from None
    return envpool


def _silence_box_cast_notice() -> None:
    """EnvPool rebuilds its Gymnasium spaces from float64 bounds (at ``make`` and on every ``recv``) and Gymnasium
    warns each time that it casts them to float32: nothing a user can act on, so that one message is dropped."""
    warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32", category=UserWarning)


def _preset_task(env_id: str, env_kwargs: dict[str, Any] | None, preset: AtariPreset) -> tuple[str, dict[str, Any]]:
    """EnvPool's task id of the game and its options under ``preset`` (``env_kwargs`` may not override them)."""
    fixed = sorted(set(env_kwargs or {}) & set(preset.envpool_kwargs()))
    if fixed:
        raise ConfigError(f"env_kwargs sets {fixed}, which atari_preset={preset.name!r} fixes; drop them or the preset")
    game = game_name(env_id, preset, "{game}-v5")
    return f"{game}-v5", {**(env_kwargs or {}), **preset.envpool_kwargs()}


class _SpacesOnly(gymnasium.Env):
    """An env that only has spaces: the innermost env of the wrapper chain mirrored around an EnvPool."""

    def __init__(self, observation_space: gymnasium.Space, action_space: gymnasium.Space) -> None:
        self.observation_space = observation_space
        self.action_space = action_space


class EnvPoolEnv(VectorBackend):
    """An EnvPool task stepped by its C++ thread pool; no snapshots (``can_snapshot`` is False).

    Args:
        env_id: an EnvPool task id (``envpool.list_all_envs()``), e.g. ``"HalfCheetah-v5"``, ``"CartPole-v1"``.
        env_kwargs: EnvPool options for ``envpool.make`` (e.g. ``max_episode_steps``, ``frame_skip``).
        wrappers: observation/action wrapper classes with their ``init_args``, in order (see the module doc).
        num_threads: EnvPool worker threads (0: EnvPool's default).
        atari_preset: ``"baselines"``, ``"machado"`` or ``"atari100k"``: ``env_id`` names the game (``Breakout`` or
            ``Breakout-v5``) and the preset sets EnvPool's Atari options (``rl_lightning.envs.gymnasium.atari``).
        atari_eval: the preset's evaluation form (whole games, raw scores); ``fresh`` (the eval env) sets it.
    """

    def __init__(
        self,
        env_id: str,
        env_kwargs: dict[str, Any] | None = None,
        wrappers: list[ClassConfig] | None = None,
        num_threads: int = 0,
        *,
        atari_preset: str | None = None,
        atari_eval: bool = False,
    ) -> None:  # deliberately not GymnasiumBackend.__init__: the id is EnvPool's, not Gymnasium's
        envpool = _import_envpool()
        self.atari = named_preset(atari_preset, atari_eval)
        if self.atari is not None:
            env_id, env_kwargs = _preset_task(env_id, env_kwargs, self.atari)
        if env_id not in envpool.list_all_envs():
            matches = difflib.get_close_matches(env_id, envpool.list_all_envs(), n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(repr(m) for m in matches)}? " if matches else ""
            raise ConfigError(f"env_id={env_id!r} is not an EnvPool task; {hint}see envpool.list_all_envs()")
        self.env_kwargs = dict(env_kwargs or {})
        self.wrappers = [class_spec(w, f"wrappers[{i}]") for i, w in enumerate(wrappers or [])]
        self.num_threads = num_threads
        self._id = env_id
        try:
            pool_spec = envpool.make_spec(env_id, **self.env_kwargs)
        except Exception as err:
            detail = " ".join(f"{type(err).__name__}: {err}".split())
            raise ConfigError(f"env_kwargs={self.env_kwargs!r}: not EnvPool options of {env_id!r} ({detail})") from None
        _silence_box_cast_notice()
        obs_space, act_space = pool_spec.observation_space, pool_spec.action_space
        self._chain = self._mirror_wrappers(obs_space, act_space)
        outer = self._chain[-1] if self._chain else _SpacesOnly(obs_space, act_space)
        self.spec = env_spec(env_id, outer.observation_space, outer.action_space, pool_spec.config.max_episode_steps)
        self._action_space = outer.action_space
        self._obs_space = outer.observation_space
        self._num = None
        self._obs = None
        self._pool: Any = None
        self._score: np.ndarray | None = None  # Atari: each env's raw score since its game started

    @property
    def env_id(self) -> str:
        return self._id

    def _mirror_wrappers(self, obs_space: gymnasium.Space, act_space: gymnasium.Space) -> list[gymnasium.Wrapper]:
        """The configured wrappers around a spaces-only env, innermost first; only obs/action wrappers."""
        for i, cls in enumerate(check_wrappers(self.wrappers)):
            if not issubclass(cls, gymnasium.ObservationWrapper | gymnasium.ActionWrapper):
                fix = (
                    "use EnvPool's max_episode_steps in env_kwargs"
                    if issubclass(cls, gymnasium.wrappers.TimeLimit)
                    else "use GymnasiumVectorEnv or GymnasiumEnv for it"
                )
                raise ConfigError(
                    f"wrappers[{i}].class_path={self.wrappers[i].class_path!r}: EnvPool's C++ envs take only "
                    f"observation and action wrappers; {fix}"
                )
        env = apply_wrappers(_SpacesOnly(obs_space, act_space), self.wrappers)
        chain = []
        while isinstance(env, gymnasium.Wrapper):
            chain.append(env)
            env = env.env
        return chain[::-1]

    def _observations(self, obs: np.ndarray) -> np.ndarray:
        wrappers = [w for w in self._chain if isinstance(w, gymnasium.ObservationWrapper)]
        if not wrappers:
            return obs
        rows = []
        for row in obs:
            for wrapper in wrappers:
                row = wrapper.observation(row)
            rows.append(row)
        return np.stack(rows)

    def _actions(self, actions: np.ndarray) -> np.ndarray:
        wrappers = [w for w in reversed(self._chain) if isinstance(w, gymnasium.ActionWrapper)]
        if not wrappers:
            return actions
        rows = []
        for row in actions:
            for wrapper in wrappers:
                row = wrapper.action(row)
            rows.append(row)
        return np.stack(rows)

    def _reset_all(self, seeds: list[int]) -> np.ndarray:
        self.close()
        envpool = _import_envpool()
        self._pool = envpool.make(
            self._id, env_type="gymnasium", num_envs=len(seeds), seed=seeds, num_threads=self.num_threads,
            **self.env_kwargs,
        )  # fmt: skip
        obs, _ = self._pool.reset()
        self._score = np.zeros(len(seeds), dtype=np.float64)
        return self._observations(obs)

    def _step_all(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        pool_actions = self._actions(actions)
        obs, reward, terminated, truncated, info = self._pool.step(pool_actions)
        if self.atari is not None:
            self._games = self._count_games(info, truncated)
        if self.next_step:  # EnvPool's own autoreset is next-step (next_step_autoreset)
            if self.atari is not None and self.atari.stack > 1 and self._ended.any():
                obs = obs.copy()  # a new life's stack restarts from its first frame too, as a new game's does
                frames = obs.reshape(len(obs), self.atari.stack, -1, *obs.shape[2:])
                frames[self._ended, :-1] = frames[self._ended, -1:]
            obs = self._observations(obs)
            return obs, obs, reward, terminated, truncated
        final_obs = self._observations(obs)  # each observation the pool makes goes through the wrappers once
        done = np.flatnonzero(np.logical_or(terminated, truncated))
        if done.size:  # same-step autoreset: the finished envs take their next step now, which resets them
            obs = final_obs.copy()
            ids, reset_obs = self._restart(done, pool_actions)
            obs[ids] = self._observations(reset_obs)
            return obs, final_obs, reward, terminated, truncated
        return final_obs, final_obs, reward, terminated, truncated

    def _restart(self, done: np.ndarray, pool_actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Step only the finished envs (EnvPool ignores the action of an env's step after it finished and resets
        it): their rows and first observations.

        Not ``reset(ids)``, which restarts an Atari game: after a life loss under ``episodic_life`` this step only
        plays on (no-ops and FIRE, the game goes on); a game over or a time limit restarts the game. The frame
        stack then holds only the new start, as openai/baselines' ``FrameStack`` refills it at every reset.
        """
        self._pool.send(pool_actions[done], done.astype(np.int32))
        reset_obs, _, _, _, info = self._pool.recv()
        if self.atari is not None and self.atari.stack > 1:
            frames = reset_obs.reshape(len(reset_obs), self.atari.stack, -1, *reset_obs.shape[2:])
            frames[:, :-1] = frames[:, -1:]
        return info["env_id"], reset_obs

    def _count_games(self, info: dict[str, Any], truncated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(game_score, game_over)``: EnvPool's ``info["reward"]`` is the raw reward and ``info["terminated"]``
        the game over (a life loss is ``terminated`` only under ``episodic_life``)."""
        self._score += info["reward"]
        over = np.logical_or(info["terminated"].astype(bool), truncated)
        score = self._score.copy()
        self._score[over] = 0.0
        return score, over

    def _unstarted(self) -> dict[str, Any]:
        return {**super()._unstarted(), "_pool": None, "_score": None}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        super().close()
