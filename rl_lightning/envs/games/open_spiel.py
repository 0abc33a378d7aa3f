"""OpenSpiel games through ``pyspiel``, as a batched multi-seat env (docs/guides/games.md).

Each row holds a ``pyspiel.State`` and its own ``random.Random`` (seeded from the run's torch generator when the
row is made; a draw costs 30 ns against about 1 us for a numpy Generator, and a Hearts deal draws 53 times).
Chance nodes (deals, dice) are resolved from that RNG, so a snapshot (``state.clone()`` plus a copy of the RNG)
fully determines its future, new games included, like ``GymnasiumEnv``'s env copies.

Observation: the acting seat's ``observation_tensor`` where the game provides one, else its
``information_state_tensor`` (Hearts has only the latter; ``observation: info_state`` picks it where both exist),
read through OpenSpiel's observer API into a preallocated buffer (no Python lists). ``reward`` ``[B, S]`` is the
change of ``state.returns()`` over the tick's move and the chance nodes after it (games paying during play: Hanabi,
2048), so a game's credited rewards sum to its ``returns()`` (``state.rewards()`` after a chance node still reports
the move before it, and would pay it twice); games with a terminal reward model (Hearts, Connect Four, poker) pay
``state.returns()`` on the tick the game ends, whichever seat moved (Hearts with ``reward: trick``: each trick's
points when it ends, the same sum per hand). ``game_score`` ``[B, S]`` on rows whose game
ended is the result as the game's players count it: Hearts ``state.points(seat)`` (points taken in the hand, after
the moon rule; lower is better; ``returns() = 26 - points``), every other game its ``returns()``.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from itertools import accumulate
from typing import Any

import numpy as np

from rl_lightning.envs.base import EnvSpec
from rl_lightning.envs.games.base import GameRow, TickBuffers, TurnBasedGameEnv, close_names, one_line
from rl_lightning.envs.games.hearts_reward import REWARDS, TrickReward
from rl_lightning.errors import ConfigError

#: ``observation`` choices: ``auto`` is the observation tensor where the game has one, else the info state.
OBSERVATIONS = ("auto", "observation", "info_state")
_PREFIX = "open_spiel:"


def _pyspiel() -> Any:
    try:
        import pyspiel
    except ImportError as err:
        raise ConfigError(
            f'OpenSpielEnv needs open_spiel ({one_line(err)}); install the games extra: pip install -e ".[games]"'
        ) from None
    return pyspiel


def _check_kwargs(name: str, params: dict[str, Any], game_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Check each ``game_kwargs`` key and value type against the game's parameter specification."""
    checked = {}
    for key, value in game_kwargs.items():
        where = f"game_kwargs.{key}={value!r}"
        if key not in params:
            known = ", ".join(sorted(params)) or "none"
            raise ConfigError(f"{where}: {name} has no parameter {key!r}{close_names(key, params)}; its parameters: "
                              f"{known}")  # fmt: skip
        default = params[key]
        kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}.get(type(default))
        if kinds is not None:
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise ConfigError(f"{where}: {name} expects {type(default).__name__} values for {key!r} "
                                  f"(default {default!r})")  # fmt: skip
            value = float(value) if isinstance(default, float) else value
        checked[key] = value
    return checked


def load_game(env_id: str, game_kwargs: dict[str, Any] | None) -> Any:
    """``pyspiel.load_game`` for ``open_spiel:NAME`` (or ``NAME``) with checked parameters; one-line errors.

    A full OpenSpiel game string (``turn_based_simultaneous_game(game=goofspiel())``) is loaded as written.
    """
    pyspiel = _pyspiel()
    name = env_id.removeprefix(_PREFIX)
    game_kwargs = dict(game_kwargs or {})
    short = name.split("(", 1)[0]
    names = pyspiel.registered_names()
    if short not in names:
        raise ConfigError(f"env_id={env_id!r}: OpenSpiel has no game {short!r}{close_names(short, names)}; "
                          f"pyspiel.registered_names() lists them all")  # fmt: skip
    if "(" in name:
        if game_kwargs:
            raise ConfigError(f"env_id={env_id!r} already carries its parameters: drop game_kwargs or write "
                              f"env_id: {_PREFIX}{short} with game_kwargs")  # fmt: skip
    else:
        game_type = next(t for t in pyspiel.registered_games() if t.short_name == short)
        game_kwargs = _check_kwargs(short, dict(game_type.parameter_specification), game_kwargs)
    try:
        return pyspiel.load_game(name, game_kwargs) if game_kwargs else pyspiel.load_game(name)
    except pyspiel.SpielError as err:
        raise ConfigError(f"env_id={env_id!r} game_kwargs={game_kwargs!r}: OpenSpiel refused them "
                          f"({one_line(err)})") from None  # fmt: skip


def _check_carried(game: Any, name: str) -> None:
    """Refuse, in one line saying what would fit, a game this env cannot present as turn-based seats."""
    pyspiel = _pyspiel()
    game_type = game.get_type()
    dynamics = pyspiel.GameType.Dynamics
    if game_type.dynamics == dynamics.SIMULTANEOUS:
        raise ConfigError(
            f"env_id={name!r} is a simultaneous-move game; OpenSpielEnv plays turn-based games: write env_id: "
            f"'{_PREFIX}turn_based_simultaneous_game(game={game_type.short_name}())' (each seat then chooses "
            "without seeing the others' choices)"
        )
    if game_type.dynamics != dynamics.SEQUENTIAL:
        raise ConfigError(f"env_id={name!r} has {game_type.dynamics.name} dynamics; OpenSpielEnv plays sequential "
                          "(turn-based) games")  # fmt: skip
    if game_type.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC:
        raise ConfigError(
            f"env_id={name!r} draws its chance events inside the engine (sampled stochastic), so runs could not "
            "follow the trainer's seed; OpenSpielEnv carries deterministic and explicit-chance games"
        )
    if not (game_type.provides_observation_tensor or game_type.provides_information_state_tensor):
        raise ConfigError(f"env_id={name!r} provides neither an observation tensor nor an information state "
                          "tensor, so a network has nothing to read; pick a game that provides one")  # fmt: skip


def _changed_params(game: Any) -> tuple[tuple[str, Any], ...]:
    """The game's scalar parameters that differ from its registered defaults, by name (``EnvSpec.game_params``)."""
    defaults = dict(game.get_type().parameter_specification)
    params = game.get_parameters()
    scalars = {key: value for key, value in params.items() if isinstance(value, bool | int | float | str)}
    changed = {key: value for key, value in scalars.items() if key in defaults and value != defaults[key]}
    return tuple(sorted(changed.items()))


def sample_chance(outcomes: list[tuple[int, float]], u: float) -> int:
    """The chance outcome that a uniform draw ``u`` in [0, 1) picks (inverse CDF; equal odds: one index).

    A Hearts deal is 52 uniform chance nodes of up to 52 outcomes: the C-level ``count``/``accumulate``/``bisect``
    cost a fraction of a Python loop over the outcomes.
    """
    actions, probs = zip(*outcomes, strict=True)
    if probs.count(probs[0]) == len(probs):
        return actions[int(u * len(actions))]
    return actions[min(bisect_right(list(accumulate(probs)), u), len(actions) - 1)]  # rounding: the last one


def _restrict(outcomes: list[tuple[int, float]], legal: list[int]) -> list[tuple[int, float]]:
    """The chance outcomes that are legal actions, their probabilities renormalised."""
    if len(outcomes) == len(legal):
        return outcomes
    allowed = set(legal)
    kept = [(outcome, prob) for outcome, prob in outcomes if outcome in allowed]
    total = sum(prob for _, prob in kept)
    if not kept or total <= 0:
        raise RuntimeError(f"chance outcomes {outcomes} share no probability with the legal actions {legal}")
    return [(outcome, prob / total) for outcome, prob in kept]


def _chance_lists_disagree(game: Any) -> bool:
    """Whether the first chance node offers outcomes that are not legal actions (then every node is checked).

    OpenSpiel 2.0.2's hearts lists all four pass directions in ``chance_outcomes`` even with ``pass_cards=false``,
    whose ``legal_actions`` allow only "no pass"; checking every chance node of every game costs a call per node.
    """
    state = game.new_initial_state()
    if not state.is_chance_node():
        return False
    return len(state.chance_outcomes()) != len(state.legal_actions())


class _Row(GameRow):
    __slots__ = ("paid", "rng", "state")

    def __init__(self, state: Any, rng: random.Random, steps: int = 0, paid: np.ndarray | None = None) -> None:
        self.state = state
        self.rng = rng
        self.steps = steps
        #: ``state.returns()`` already credited (games paying during play); 0 at a game's start, so what its first
        #: chance nodes pay is credited with the first move.
        self.paid = np.zeros(state.num_players()) if paid is None else paid


class OpenSpielEnv(TurnBasedGameEnv):
    """An OpenSpiel game, ``num_envs`` games at a time, one seat acting per game and tick.

    Args:
        env_id: ``open_spiel:NAME`` or ``NAME`` (``open_spiel:hearts``, ``connect_four``), or a full OpenSpiel
            game string such as ``open_spiel:turn_based_simultaneous_game(game=goofspiel())``.
        game_kwargs: the game's parameters (``{pass_cards: false}``); names and types are checked up front.
        observation: ``auto`` (the observation tensor where the game provides one, else the information state),
            ``observation`` or ``info_state``.
        max_episode_steps: truncate a game after this many decisions (0: only the game's own end); when > 0,
            step outputs carry ``final_obs`` ``[B, S, *obs]``.
        reward: ``engine`` (what the engine pays, when it pays it) or, for Hearts, ``trick``: each trick's points
            paid to its taker when the trick ends, the hand's sum per seat still ``returns()``
            (``envs/games/hearts_reward.py``).
        critic_obs: also emit ``critic_obs`` ``[B, S * D]``: every seat's view of the state (the ``observation``
            tensor each seat would get, flattened), the acting seat's first and then the others in turn order, for a
            centralised critic (PPO's ``critic_input: critic_obs``) that sees the hidden cards in training while
            the policy still reads only ``obs``. Needs ``max_episode_steps: 0``.
    """

    def __init__(
        self,
        env_id: str = "open_spiel:hearts",
        game_kwargs: dict[str, Any] | None = None,
        observation: str = "auto",
        max_episode_steps: int = 0,
        reward: str = "engine",
        critic_obs: bool = False,
    ) -> None:
        super().__init__()
        if reward not in REWARDS:
            raise ConfigError(f"reward={reward!r} is not a choice; choose one of {list(REWARDS)}")
        if observation not in OBSERVATIONS:
            raise ConfigError(f"observation={observation!r} is not a choice; choose one of {list(OBSERVATIONS)}")
        if max_episode_steps < 0:
            raise ConfigError(f"max_episode_steps={max_episode_steps}: must be >= 0 (0: no step limit)")
        if critic_obs and max_episode_steps:
            raise ConfigError(f"critic_obs=true with max_episode_steps={max_episode_steps}: a game cut by the limit "
                              "bootstraps from each seat's final view, which carries no critic_obs; set "
                              "max_episode_steps: 0 (or critic_obs: false)")  # fmt: skip
        self.env_id = env_id
        self.game = load_game(env_id, game_kwargs)
        _check_carried(self.game, env_id)
        self.max_episode_steps = max_episode_steps
        self.emits_final_obs = max_episode_steps > 0
        self._setup_observer(observation)
        pyspiel = _pyspiel()
        game_type = self.game.get_type()
        self.short_name = game_type.short_name
        if reward == "trick" and self.short_name != "hearts":
            raise ConfigError(f"reward='trick' pays Hearts' points per trick and {env_id} is {self.short_name!r}; use "
                              "reward: engine")  # fmt: skip
        self._trick_reward = TrickReward(self.game.num_players()) if reward == "trick" else None
        self._dense = game_type.reward_model == pyspiel.GameType.RewardModel.REWARDS
        self._points = self.short_name == "hearts"
        self._check_chance = _chance_lists_disagree(self.game)
        self._no_chance = game_type.chance_mode == pyspiel.GameType.ChanceMode.DETERMINISTIC
        self.score_name = "points" if self._points else "return"
        self.score_lower_is_better = self._points
        if not self._points:  # Hearts' points are not its utilities (returns = 26 - points)
            self.score_range = (float(self.game.min_utility()), float(self.game.max_utility()))
        self.spec = EnvSpec(
            name=f"{_PREFIX}{self.short_name}",
            obs_shape=self._obs_shape,
            discrete=True,
            num_actions=self.game.num_distinct_actions(),
            has_action_mask=True,
            max_episode_steps=max_episode_steps,
            num_seats=self.game.num_players(),
            perfect_information=game_type.information == pyspiel.GameType.Information.PERFECT_INFORMATION,
            game_params=_changed_params(self.game),
            critic_obs_shape=(self.game.num_players() * math.prod(self._obs_shape),) if critic_obs else (),
        )

    def __getstate__(self) -> dict[str, Any]:
        """All but the observer (a pyspiel handle, not picklable) and the live games: a process that receives a
        pickled copy (an actor, ``data.num_actors``) makes its own observer in ``__setstate__`` and starts no game."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("_observer", "_view")}
        state["_rows"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup_observer(self.observation)

    def _setup_observer(self, observation: str) -> None:
        """Pick the tensor (``observation`` option) and make the observer that writes it into a reused buffer."""
        from open_spiel.python.observation import INFO_STATE_OBS_TYPE, make_observation

        game_type = self.game.get_type()
        if observation == "auto":
            observation = "observation" if game_type.provides_observation_tensor else "info_state"
        provided = {"observation": game_type.provides_observation_tensor,
                    "info_state": game_type.provides_information_state_tensor}  # fmt: skip
        if not provided[observation]:
            other = "info_state" if observation == "observation" else "observation"
            raise ConfigError(f"observation={observation!r}: {self.env_id} does not provide that tensor; use "
                              f"observation: {other}")  # fmt: skip
        self.observation = observation
        if observation == "info_state":
            shape = self.game.information_state_tensor_shape()
            self._observer = make_observation(self.game, INFO_STATE_OBS_TYPE)
        else:
            shape = self.game.observation_tensor_shape()
            self._observer = make_observation(self.game)
        self._obs_shape = tuple(int(d) for d in shape)
        self._view = self._observer.tensor.reshape(self._obs_shape)  # a view of the observer's buffer

    # ---- rows ----------------------------------------------------------------------------------------------------
    def _new_row(self, seed: int) -> _Row:
        row = _Row(self.game.new_initial_state(), random.Random(seed))
        self._resolve_chance(row)
        return row

    def _copy_row(self, row: _Row) -> _Row:
        if self._no_chance:  # nothing ever draws from the RNG: the copies share it (copying costs 5x the clone)
            # but not the returns already credited: a copy starting at 0 would pay the whole game on its next move
            return _Row(row.state.clone(), row.rng, row.steps, row.paid.copy())
        rng = random.Random()
        rng.setstate(row.rng.getstate())
        return _Row(row.state.clone(), rng, row.steps, row.paid.copy())

    def _restart(self, row: _Row) -> None:
        row.state = self.game.new_initial_state()
        if self._dense:  # only the dense reward model reads what was paid
            row.paid[:] = 0.0
        self._resolve_chance(row)

    def _resolve_chance(self, row: _Row) -> None:
        """Play chance nodes from the row's RNG until a seat must act (or the game ends)."""
        state = row.state
        while state.is_chance_node():
            outcomes = state.chance_outcomes()
            if self._check_chance:
                outcomes = _restrict(outcomes, state.legal_actions())
            state.apply_action(sample_chance(outcomes, row.rng.random()))

    def _apply(self, row: _Row, action: int, reward: np.ndarray) -> str | None:
        state = row.state
        taken = None if self._trick_reward is None else self._trick_reward.taken(state)
        state.apply_action(action)
        if state.is_chance_node():
            self._resolve_chance(row)
        if self._dense:  # what the move and its chance nodes paid: the change of returns() (module docstring)
            now = np.asarray(state.returns())
            reward += now - row.paid
            row.paid = now
        if taken is not None:
            self._trick_reward.pay(state, taken, reward)
        if state.is_terminal():
            if not self._dense:  # per seat in float64, as ``reward += returns`` would, at a fifth of its cost
                for seat, value in enumerate(state.returns()):
                    reward[seat] = float(reward[seat]) + value
            return "terminated"
        return None

    def _write_view(self, row: _Row, index: int, buffers: TickBuffers) -> None:
        state = row.state
        seat = state.current_player()
        buffers.seat[index] = seat
        self._observer.set_from(state, seat)
        buffers.obs[index] = self._view
        buffers.legal.append(state.legal_actions())
        buffers.is_first[index] = row.steps == 0
        if buffers.critic_obs is not None:  # every seat's view, the acting seat's first (already in the buffer)
            views = buffers.critic_views  # [B, S, *obs], laid over critic_obs once per tick
            views[index, 0] = self._view
            seats = views.shape[1]
            for k in range(1, seats):
                self._observer.set_from(state, (seat + k) % seats)
                views[index, k] = self._view

    def seat_observation(self, state: Any, seat: int) -> np.ndarray:
        """A copy of what seat ``seat`` observes in the ``pyspiel.State`` ``state``: the network input this env emits
        when that seat acts there (exploitability enumerates every information state through it)."""
        self._observer.set_from(state, seat)
        return self._view.copy()

    def _write_score(self, row: _Row, score: np.ndarray) -> None:
        state = row.state
        score[:] = [state.points(seat) for seat in range(len(score))] if self._points else state.returns()

    def _write_final_obs(self, row: _Row, final_obs: np.ndarray) -> None:
        for seat in range(final_obs.shape[0]):
            self._observer.set_from(row.state, seat)
            final_obs[seat] = self._view

    def __deepcopy__(self, memo: dict) -> OpenSpielEnv:
        """A rebuilt env whose registry holds clones of this one's games under the same ids (pyspiel's observer
        buffer cannot be copied, so the default deep copy fails)."""
        twin = self.fresh()
        twin._rows = {sid: self._copy_row(row) for sid, row in self._rows.items()}
        twin._next_id = self._next_id
        return twin

    def engine_state(self, state: Any, index: int) -> Any:
        """The ``pyspiel.State`` of row ``index`` of ``state`` (live, not a copy: for tests and bots' checks)."""
        return self._row(self._ids(state)[index]).state
