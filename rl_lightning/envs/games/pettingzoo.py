"""PettingZoo AEC (and Parallel) envs as a batched multi-seat env (docs/guides/games.md).

Seats are the env's ``possible_agents`` in order. Each row holds one AEC env. Per tick the acting agent
(``agent_selection``) steps with the row's action; every agent's entry of ``env.rewards`` after that step is
credited to its seat (an agent is often paid while another acts), then agents that are done and selected are
stepped with ``None`` (the AEC protocol for dead agents) until a live agent must act or none is left. The game ends
when no agent is left: ``truncated`` if the agents that ended it were truncated, else ``terminated``.
``game_score`` is each seat's sum of rewards over the game. A seat that leaves the game early (eliminated:
terminated while others play on) stays terminated if the game is later truncated: ``seat_truncated`` marks only
the seats that were still playing when the game was cut.

Observation: ``obs["observation"]`` (or a plain array observation). The legal-action mask is read where PettingZoo
envs put it: ``obs["action_mask"]`` (the classic games) or ``infos[agent]["action_mask"]`` (common in Parallel
envs). An env with neither is refused at start-up unless ``all_actions_legal=True`` declares every action always
legal. A Parallel env is played through PettingZoo's own ``parallel_to_aec``: the seats choose one after another
but the env steps jointly once every live seat has chosen, so no seat sees another's choice of the same step.
PettingZoo envs cannot snapshot (no search).
"""

from __future__ import annotations

import importlib
import random
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rl_lightning.envs.base import EnvSpec
from rl_lightning.envs.games.base import GameRow, TickBuffers, TurnBasedGameEnv, close_names, one_line
from rl_lightning.errors import ConfigError

_REGISTRY_ID = re.compile(r"^[\w]+/[\w]+-v\d+$")  # classic/connect_four-v3
_LEGACY_MODULE = re.compile(r"^pettingzoo\.(\w+)\.(\w+)_v(\d+)$")  # pettingzoo.classic.connect_four_v3


def _pettingzoo() -> Any:
    try:
        import pettingzoo
    except ImportError as err:
        raise ConfigError(
            f'PettingZooEnv needs pettingzoo ({one_line(err)}); install the games extra: pip install -e ".[games]"'
        ) from None
    return pettingzoo


def _import(module: str, env_id: str) -> Any:
    try:
        return importlib.import_module(module)
    except Exception as err:  # whatever the user's module raises while importing
        raise ConfigError(f"env_id={env_id!r}: module {module!r} does not import ({one_line(err)}); install it or "
                          "fix the module path")  # fmt: skip


def env_factory(env_id: str, env_kwargs: dict[str, Any]) -> Callable[[], Any]:
    """A function making one AEC env from a registry id, a module path or a ``module:attribute`` path."""
    pettingzoo = _pettingzoo()
    legacy = _LEGACY_MODULE.match(env_id)
    if legacy:  # PettingZoo's own modules warn that they are deprecated: use the registry id they stand for
        family, name, version = legacy.groups()
        candidate = f"{family}/{name}-v{version}"
        if candidate in pettingzoo.aec_registry:
            env_id = candidate
    if _REGISTRY_ID.match(env_id):
        if env_id not in pettingzoo.aec_registry:
            raise ConfigError(f"env_id={env_id!r} is not a PettingZoo registry id"
                              f"{close_names(env_id, pettingzoo.aec_registry)}")  # fmt: skip
        return lambda: pettingzoo.make("aec", env_id, **env_kwargs)
    if ":" in env_id:
        module, _, attribute = env_id.partition(":")
        maker = getattr(_import(module, env_id), attribute, None)
        if not callable(maker):
            raise ConfigError(f"env_id={env_id!r}: module {module!r} has no class or function {attribute!r}")
        return lambda: maker(**env_kwargs)
    module = _import(env_id, env_id)
    for name in ("env", "parallel_env"):
        if callable(getattr(module, name, None)):
            return lambda: getattr(module, name)(**env_kwargs)
    raise ConfigError(f"env_id={env_id!r}: the module has neither env() nor parallel_env(); name a class or "
                      "function instead: 'package.module:MyEnv'")  # fmt: skip


def as_aec(env: Any, env_id: str) -> Any:
    """The env as an AEC env (a Parallel env through PettingZoo's own ``parallel_to_aec``)."""
    from pettingzoo import AECEnv, ParallelEnv
    from pettingzoo.utils.conversions import parallel_to_aec

    if isinstance(env, ParallelEnv):
        return parallel_to_aec(env)
    if not isinstance(env, AECEnv):
        raise ConfigError(f"env_id={env_id!r} made a {type(env).__name__}, not a PettingZoo AECEnv or ParallelEnv")
    return env


def _describe(space: Any) -> str:
    return f"{type(space).__name__}{getattr(space, 'shape', '')}"


def check_spaces(env: Any, env_id: str) -> tuple[tuple[int, ...], np.dtype, int, bool, bool]:
    """``(obs_shape, obs_dtype, num_actions, observation is a dict, mask in the observation)`` shared by every agent;
    one-line refusals otherwise."""
    from gymnasium import spaces

    agents = list(env.possible_agents)
    actions = {agent: env.action_space(agent) for agent in agents}
    for agent, space in actions.items():
        if not isinstance(space, spaces.Discrete):
            raise ConfigError(f"env_id={env_id!r}: agent {agent!r} acts in {_describe(space)}; PettingZooEnv needs "
                              "Discrete(n) actions for every agent (discretise the actions, or use a Gymnasium "
                              "backend for single-agent continuous control)")  # fmt: skip
    if len({int(space.n) for space in actions.values()}) > 1:
        found = ", ".join(f"{agent}: Discrete({int(space.n)})" for agent, space in actions.items())
        raise ConfigError(f"env_id={env_id!r}: the agents' action spaces differ ({found}); one shared policy needs "
                          "one action space: pad them to the largest n and mask the extra actions")  # fmt: skip
    views = {agent: _observation_space(env.observation_space(agent), agent, env_id) for agent in agents}
    if len({(box.shape, box.dtype, is_dict, masked) for box, is_dict, masked in views.values()}) > 1:
        found = ", ".join(f"{agent}: {box.shape} {box.dtype}" for agent, (box, _, _) in views.items())
        raise ConfigError(f"env_id={env_id!r}: the agents' observations differ ({found}); one shared policy needs "
                          "one observation shape and dtype: pad them, or wrap the env so every agent sees the same "
                          "layout")  # fmt: skip
    box, is_dict, masked = views[agents[0]]
    return tuple(box.shape), np.dtype(box.dtype), int(actions[agents[0]].n), is_dict, masked


def _observation_space(space: Any, agent: str, env_id: str) -> tuple[Any, bool, bool]:
    """``(the Box a network reads, whether it comes in a dict, whether an action_mask comes with it)`` for one
    agent's observation space."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        if "observation" not in space.spaces:
            raise ConfigError(f"env_id={env_id!r}: agent {agent!r} observes a Dict without an 'observation' key "
                              f"(keys {sorted(space.spaces)}); PettingZooEnv reads obs['observation'] and "
                              "obs['action_mask']")  # fmt: skip
        is_dict, masked = True, "action_mask" in space.spaces
        space = space.spaces["observation"]
    else:
        is_dict, masked = False, False
    if not isinstance(space, spaces.Box):
        raise ConfigError(
            f"env_id={env_id!r}: agent {agent!r} observes {_describe(space)}; PettingZooEnv reads array "
            "observations (a Box, or a Dict of a Box 'observation' and an 'action_mask')"
        )
    return space, is_dict, masked


#: Where an env's legal-action mask is read (``PettingZooEnv.mask_source``).
MASK_IN_OBS, MASK_IN_INFOS, NO_MASK = "observation", "infos", "none"


def mask_source(env: Any, env_id: str, in_obs: bool, all_actions_legal: bool) -> str:
    """Where the mask of a freshly reset ``env`` lives; one-line refusal of an env without one unless declared."""
    if in_obs:
        return MASK_IN_OBS
    agent = env.agent_selection
    if "action_mask" in (env.infos.get(agent) or {}):
        return MASK_IN_INFOS
    if all_actions_legal:
        return NO_MASK
    raise ConfigError(f"env_id={env_id!r}: agent {agent!r} has no action mask (neither obs['action_mask'] nor "
                      "infos[agent]['action_mask']), so illegal moves cannot be masked; add one, or declare that every "
                      "action is always legal with all_actions_legal: true")  # fmt: skip


def innermost(env: Any) -> Any:
    """The AEC env under every PettingZoo wrapper (``unwrapped`` of ``parallel_to_aec`` is the Parallel env)."""
    from pettingzoo.utils import BaseWrapper

    while isinstance(env, BaseWrapper):
        env = env.env
    return env


class _Row(GameRow):
    __slots__ = ("env", "left", "raw", "rng", "score")

    def __init__(self, env: Any, rng: random.Random, seats: int) -> None:
        self.env = env  # stepped, reset and observed through its wrappers
        self.raw = innermost(env)  # read directly: wrappers forward these attributes, each through __getattr__
        self.rng = rng
        self.score = np.zeros(seats, dtype=np.float32)
        self.left = np.zeros(seats, dtype=np.int8)  # per seat: 0 playing, else how it left (_TERMINATED, _TRUNCATED)
        self.steps = 0


_TERMINATED, _TRUNCATED = 1, 2  # ``_Row.left`` codes


class _AecMaker:
    """Makes one AEC env of ``env_id`` (picklable, unlike a closure: an actor process rebuilds its games with it)."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        self.env_id, self.env_kwargs = env_id, env_kwargs
        self._make = env_factory(env_id, env_kwargs)

    def __getstate__(self) -> dict[str, Any]:
        return {"env_id": self.env_id, "env_kwargs": self.env_kwargs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["env_id"], state["env_kwargs"])

    def __call__(self) -> Any:
        return as_aec(self._make(), self.env_id)


class PettingZooEnv(TurnBasedGameEnv):
    """A PettingZoo AEC or Parallel env, ``num_envs`` copies, one seat acting per copy and tick.

    Args:
        env_id: a PettingZoo registry id (``classic/connect_four-v3``), a module with ``env()`` or
            ``parallel_env()`` (``pettingzoo.classic.connect_four_v3``, or the user's ``my_pkg.my_game``), or a
            class or function path (``my_pkg.my_game:MyEnv``), called with ``env_kwargs``.
        env_kwargs: keyword arguments for the env's constructor.
        max_episode_steps: truncate a game after this many decisions (0: only the env's own end).
        perfect_information: declare that every seat sees the whole state (PettingZoo does not say; False keeps
            search-based algorithms off).
        all_actions_legal: declare that every action is legal for every agent at every turn: an env whose
            observation and infos carry no ``action_mask`` is refused without it.
    """

    can_snapshot = False  # a live Python env object per row; no general copy

    def __init__(
        self,
        env_id: str = "classic/connect_four-v3",
        env_kwargs: dict[str, Any] | None = None,
        max_episode_steps: int = 0,
        perfect_information: bool = False,
        all_actions_legal: bool = False,
    ) -> None:
        super().__init__()
        if max_episode_steps < 0:
            raise ConfigError(f"max_episode_steps={max_episode_steps}: must be >= 0 (0: no step limit)")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self._make = _AecMaker(env_id, self.env_kwargs)
        try:
            prototype = self._make()
            prototype.reset(seed=0)
        except ConfigError:
            raise
        except Exception as err:
            raise ConfigError(f"env_id={env_id!r} env_kwargs={self.env_kwargs!r}: making and resetting the env "
                              f"failed ({one_line(err)})") from None  # fmt: skip
        self.agents = list(prototype.possible_agents)
        self._seat_of = {agent: seat for seat, agent in enumerate(self.agents)}
        obs_shape, obs_dtype, num_actions, self._obs_dict, in_obs = check_spaces(prototype, env_id)
        self.mask_source = mask_source(innermost(prototype), env_id, in_obs, all_actions_legal)
        prototype.close()
        self.obs_numpy_dtype = np.dtype(np.float32) if obs_dtype == np.float64 else obs_dtype
        self.max_episode_steps = max_episode_steps
        self.emits_final_obs = True  # any AEC env may truncate a game by itself
        self.spec = EnvSpec(
            name=env_id,
            obs_shape=obs_shape,
            discrete=True,
            num_actions=num_actions,
            has_action_mask=True,
            max_episode_steps=max_episode_steps,
            obs_dtype=torch.from_numpy(np.empty(0, self.obs_numpy_dtype)).dtype,
            num_seats=len(self.agents),
            perfect_information=perfect_information,
        )

    def __getstate__(self) -> dict[str, Any]:
        """All but the live games: a process that receives a pickled copy (an actor) starts its own."""
        return {**self.__dict__, "_rows": {}}

    # ---- rows ----------------------------------------------------------------------------------------------------
    def _new_row(self, seed: int) -> _Row:
        row = _Row(self._make(), random.Random(seed), len(self.agents))
        self._restart(row)
        return row

    def _copy_row(self, row: _Row) -> _Row:
        raise RuntimeError(f"PettingZooEnv({self.env_id!r}) cannot snapshot a game (can_snapshot is False)")

    def _close_row(self, row: _Row) -> None:
        row.env.close()

    def _restart(self, row: _Row) -> None:
        row.env.reset(seed=row.rng.randrange(2**31))
        row.score[:] = 0
        row.left[:] = 0
        self._skip_dead(row, None)

    def _credit(self, row: _Row, reward: np.ndarray | None) -> None:
        """Add every agent's reward of the last AEC step to its seat (and to the game's score)."""
        for agent, value in row.raw.rewards.items():
            if value:
                seat = self._seat_of[agent]
                row.score[seat] += value
                if reward is not None:
                    reward[seat] += value

    def _skip_dead(self, row: _Row, reward: np.ndarray | None) -> bool:
        """Step selected dead agents with ``None`` until a live one acts or none is left; True if one was truncated."""
        raw, cut = row.raw, False
        while raw.agents:
            agent = raw.agent_selection
            terminated, truncated = raw.terminations.get(agent, False), raw.truncations.get(agent, False)
            if not (terminated or truncated):
                break
            cut = cut or (truncated and not terminated)
            row.left[self._seat_of[agent]] = _TRUNCATED if truncated and not terminated else _TERMINATED
            row.env.step(None)
            self._credit(row, reward)
        return cut

    def _apply(self, row: _Row, action: int, reward: np.ndarray) -> str | None:
        row.env.step(action)
        self._credit(row, reward)
        cut = self._skip_dead(row, reward)
        if row.raw.agents:
            return None
        return "truncated" if cut else "terminated"

    def _write_view(self, row: _Row, index: int, buffers: TickBuffers) -> None:
        agent = row.raw.agent_selection
        buffers.seat[index] = self._seat_of[agent]
        obs = row.env.observe(agent)
        buffers.obs[index] = obs["observation"] if self._obs_dict else obs
        if self.mask_source == MASK_IN_OBS:
            buffers.mask[index] = obs["action_mask"]
        elif self.mask_source == MASK_IN_INFOS:
            buffers.mask[index] = self._infos_mask(row, agent)
        else:
            buffers.mask[index] = True
        buffers.is_first[index] = row.steps == 0

    def _infos_mask(self, row: _Row, agent: str) -> Any:
        mask = (row.raw.infos.get(agent) or {}).get("action_mask")
        if mask is None:
            raise RuntimeError(f"{self.env_id}: agent {agent!r} has no infos['action_mask'] on this turn (it had one "
                               "at reset); put the mask in every turn's infos")  # fmt: skip
        return mask

    def _write_score(self, row: _Row, score: np.ndarray) -> None:
        score[:] = row.score

    def _write_seat_truncated(self, row: _Row, truncated: bool, out: np.ndarray) -> None:
        """A seat that left the game says how it left; a seat still in it when the step limit cut the game was cut
        unless the env had already terminated it."""
        for seat, agent in enumerate(self.agents):
            if row.left[seat]:
                out[seat] = row.left[seat] == _TRUNCATED
            else:
                out[seat] = truncated and not row.raw.terminations.get(agent, False)

    def _write_final_obs(self, row: _Row, final_obs: np.ndarray) -> None:
        for seat, agent in enumerate(self.agents):
            obs = row.env.observe(agent)
            final_obs[seat] = obs["observation"] if self._obs_dict else obs
