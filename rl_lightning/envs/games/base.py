"""What the turn-based game backends share: a registry of live games and the tick that assembles the outputs.

A game backend (``OpenSpielEnv``, ``PettingZooEnv``) keeps one Python game object per row in a registry keyed by
int ids; the env ``state`` is a TensorDict holding those ids (``snapshot``), as ``GymnasiumEnv`` does. Every id a
caller obtains (``reset_state``, ``snapshot``, ``step_state(inplace=False)``) is freed with ``release``;
``live_count`` makes leaks observable and ``close`` frees everything.

One tick steps each row in a Python loop that writes into preallocated numpy arrays (``TickBuffers``); the arrays
become torch tensors once per tick. The outputs are the multi-seat contract of docs/guides/games.md: ``obs``,
``action_mask`` and ``seat`` of the seat to act next, ``is_first``, ``reward`` ``[B, S]``, ``terminated`` and
``truncated`` per game, ``game_score`` ``[B, S]`` (each seat's result of a game that ended on this tick, as its
players count it; zero on other rows) and, where the env can truncate, ``final_obs`` ``[B, S, *obs]`` (every
seat's own view of the last state of a game that ended on this tick; zero on other rows) with ``seat_truncated``
``[B, S]`` (which seats of a game that ended were cut while still playing: a seat eliminated earlier in a truncated
game was terminated, and bootstraps from 0). A finished game is
replaced by a new one in the same tick (same-step autoreset).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import TorchEnv
from rl_lightning.errors import EnvError

#: The state's one key: int64 ids into the backend's registry of live games.
SNAPSHOT = "snapshot"
#: Step output: each seat's result of a game that ended on this tick (Hearts: points taken), zero elsewhere.
GAME_SCORE = "game_score"


class GameRow:
    """One live game of a batch: the engine's objects plus ``steps``, the decisions taken in the current game."""

    __slots__ = ("steps",)

    def __init__(self) -> None:
        self.steps = 0


@dataclass
class TickBuffers:
    """The numpy arrays one call fills row by row, converted to torch once at the end."""

    obs: np.ndarray  # [B, *obs] the acting seat's view
    mask: np.ndarray  # [B, A] bool, that seat's legal actions
    seat: np.ndarray  # [B] int64, the seat to act
    is_first: np.ndarray  # [B] bool, obs starts a game
    reward: np.ndarray | None = None  # [B, S] float32
    terminated: np.ndarray | None = None  # [B] bool
    truncated: np.ndarray | None = None  # [B] bool
    score: np.ndarray | None = None  # [B, S] float32, on rows whose game ended
    final_obs: np.ndarray | None = None  # [B, S, *obs], on rows whose game ended
    seat_truncated: np.ndarray | None = None  # [B, S] bool, on rows whose game ended: the seat was cut while in it
    critic_obs: np.ndarray | None = None  # [B, S * D] every seat's view, the acting seat's first (``critic_obs``)
    critic_views: np.ndarray | None = None  # [B, S, *obs]: the same memory as ``critic_obs``, a view per seat
    #: Each row's legal actions, in row order, where a backend lists them instead of writing ``mask`` rows (one
    #: scatter per tick costs less than a numpy fancy assignment per row).
    legal: list[list[int]] = field(default_factory=list)

    @classmethod
    def allocate(cls, env: TurnBasedGameEnv, batch: int, step: bool) -> TickBuffers:
        """Arrays for ``batch`` rows: the view only (``observe``), or a whole step's outputs."""
        spec = env.spec
        seats = spec.num_seats
        buffers = cls(
            obs=np.empty((batch, *spec.obs_shape), dtype=env.obs_numpy_dtype),
            mask=np.zeros((batch, spec.num_actions), dtype=bool),
            seat=np.empty(batch, dtype=np.int64),
            is_first=np.empty(batch, dtype=bool),
        )
        if spec.critic_obs_shape:
            buffers.critic_obs = np.empty((batch, *spec.critic_obs_shape), dtype=env.obs_numpy_dtype)
            buffers.critic_views = buffers.critic_obs.reshape(batch, seats, *spec.obs_shape)
        if step:
            buffers.reward = np.zeros((batch, seats), dtype=np.float32)
            buffers.terminated = np.zeros(batch, dtype=bool)
            buffers.truncated = np.zeros(batch, dtype=bool)
            buffers.score = np.zeros((batch, seats), dtype=np.float32)
            if env.emits_final_obs:
                buffers.final_obs = np.zeros((batch, seats, *spec.obs_shape), dtype=env.obs_numpy_dtype)
                buffers.seat_truncated = np.zeros((batch, seats), dtype=bool)
        return buffers

    def tensordict(self, batch_size: torch.Size, device: torch.device | None) -> TensorDict:
        """The contract's TensorDict (one ``from_numpy`` per array, then one move to ``device``)."""
        if self.legal:
            counts = [len(actions) for actions in self.legal]
            rows = np.repeat(np.arange(len(counts)), counts)
            self.mask[rows, np.fromiter(chain.from_iterable(self.legal), np.int64, len(rows))] = True
        named = {keys.OBS: self.obs, keys.ACTION_MASK: self.mask, keys.SEAT: self.seat, keys.IS_FIRST: self.is_first}
        if self.critic_obs is not None:
            named[keys.CRITIC_OBS] = self.critic_obs
        if self.reward is not None:
            named.update({keys.REWARD: self.reward, keys.TERMINATED: self.terminated, keys.TRUNCATED: self.truncated,
                          GAME_SCORE: self.score})  # fmt: skip
        if self.final_obs is not None:
            named[keys.FINAL_OBS] = self.final_obs
            named[keys.SEAT_TRUNCATED] = self.seat_truncated
        out = TensorDict({key: torch.from_numpy(value) for key, value in named.items()}, batch_size=batch_size)
        return out if device is None or device.type == "cpu" else out.to(device)


class TurnBasedGameEnv(TorchEnv):
    """Base of the turn-based game backends: the registry, the step loop, autoreset and step-limit truncation.

    A backend sets ``spec`` (with ``num_seats``, ``has_action_mask=True``), ``obs_numpy_dtype``,
    ``max_episode_steps`` and ``emits_final_obs``, and implements the per-row hooks: ``_new_row``, ``_copy_row``,
    ``_apply``, ``_write_view``, ``_write_score``, ``_write_final_obs`` and ``_restart``.
    """

    state_is_tensors = False  # the state is ids into a registry of Python game objects
    #: Truncate a game after this many decisions (0: never; the game's own end only).
    max_episode_steps: int = 0
    #: Whether step outputs carry ``final_obs`` (the env can truncate a game).
    emits_final_obs: bool = False
    obs_numpy_dtype: np.dtype = np.dtype(np.float32)
    #: What ``game_score`` holds (``"return"``: the sum of a seat's rewards over the game; Hearts: ``"points"``) and
    #: whether a lower score is better; evaluation reads these to report results as the game's players count them.
    score_name: str = "return"
    score_lower_is_better: bool = False
    #: The lowest and highest ``game_score`` a seat can get, where the engine says (``None``: unknown); evaluation
    #: clips its intervals to it.
    score_range: tuple[float, float] | None = None

    def __init__(self) -> None:
        self._rows: dict[int, GameRow] = {}
        self._next_id = 0

    # ---- per-row hooks -------------------------------------------------------------------------------------------
    @abstractmethod
    def _new_row(self, seed: int) -> GameRow:
        """A new game (its chance and reset randomness seeded from ``seed``), ready for its first decision."""

    @abstractmethod
    def _copy_row(self, row: GameRow) -> GameRow:
        """An independent copy of ``row`` that continues identically (raise where the backend cannot)."""

    @abstractmethod
    def _apply(self, row: GameRow, action: int, reward: np.ndarray) -> str | None:
        """Play ``action`` for the acting seat, add what each seat receives to ``reward`` ``[S]``.

        Returns None while the game goes on, else ``"terminated"`` or ``"truncated"`` (the game cut itself).
        """

    @abstractmethod
    def _write_view(self, row: GameRow, index: int, buffers: TickBuffers) -> None:
        """Write the acting seat, its observation and its legal actions into row ``index`` of ``buffers``."""

    @abstractmethod
    def _write_score(self, row: GameRow, score: np.ndarray) -> None:
        """Write each seat's result of the game that just ended into ``score`` ``[S]``."""

    @abstractmethod
    def _write_final_obs(self, row: GameRow, final_obs: np.ndarray) -> None:
        """Write every seat's view of the game's last state into ``final_obs`` ``[S, *obs]``."""

    def _write_seat_truncated(self, row: GameRow, truncated: bool, out: np.ndarray) -> None:
        """Write, for a game that just ended, which seats were cut while still in it into ``out`` ``[S]`` (default:
        every seat when the game was truncated; a backend whose seats leave a game early overrides this)."""
        out[:] = truncated

    @abstractmethod
    def _restart(self, row: GameRow) -> None:
        """Replace the finished game in ``row`` with a new one (from the row's own randomness)."""

    def _close_row(self, row: GameRow) -> None:  # noqa: B027 - optional hook
        """Free what a released row holds."""

    # ---- registry ------------------------------------------------------------------------------------------------
    @property
    def live_count(self) -> int:
        """Number of games currently held in the registry (0 after ``close``)."""
        return len(self._rows)

    def _register(self, row: GameRow) -> int:
        sid = self._next_id
        self._next_id += 1
        self._rows[sid] = row
        return sid

    def _row(self, sid: int) -> GameRow:
        row = self._rows.get(sid)
        if row is None:
            raise RuntimeError(
                f"{self.spec.name}: snapshot id {sid} was released or never existed; step or observe only live states"
            )
        return row

    @staticmethod
    def _state(ids: list[int], device: torch.device | None) -> TensorDict:
        snap = torch.tensor(ids, dtype=torch.int64, device=device)
        return TensorDict({SNAPSHOT: snap}, batch_size=[len(ids)], device=device)

    @staticmethod
    def _ids(state: TensorDict) -> list[int]:
        return state[SNAPSHOT].tolist()

    def snapshot(self, state: TensorDict) -> TensorDict:
        """Copy the games behind ``state`` into new ids (e.g. a search root); release the result when done."""
        return self._state([self._register(self._copy_row(self._row(sid))) for sid in self._ids(state)], state.device)

    def release(self, state: TensorDict) -> None:
        """Free the games behind ``state``; ids already released (or unknown) are ignored."""
        for sid in self._ids(state):
            row = self._rows.pop(sid, None)
            if row is not None:
                self._close_row(row)

    def close(self) -> None:
        """Release every game in the registry."""
        for row in self._rows.values():
            self._close_row(row)
        self._rows.clear()

    # ---- the contract --------------------------------------------------------------------------------------------
    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        """Start ``num`` new games, each seeded from ``generator`` (one draw per row, so runs are reproducible)."""
        seeds = torch.randint(0, 2**31 - 1, (num,), generator=generator, device=generator.device).tolist()
        ids: list[int] = []
        for index, seed in enumerate(seeds):
            try:
                ids.append(self._register(self._new_row(int(seed))))
            except Exception as err:
                self.release(self._state(ids, None))
                raise self._error(index, num, "reset", err) from err
        return self._state(ids, generator.device)

    def observe(self, state: TensorDict) -> TensorDict:
        """``obs``, ``action_mask``, ``seat`` and ``is_first`` of the seat to act in each game of ``state``."""
        ids = self._ids(state)
        buffers = TickBuffers.allocate(self, len(ids), step=False)
        for index, sid in enumerate(ids):
            self._write_view(self._row(sid), index, buffers)
        return buffers.tensordict(state.batch_size, state.device)

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        """Play each row's action for its acting seat; finished games restart in the same tick (module docstring)."""
        ids = self._ids(state)
        next_ids = self._inplace_ids(ids) if inplace else [self._register(self._copy_row(self._row(s))) for s in ids]
        actions = action.tolist()
        buffers = TickBuffers.allocate(self, len(ids), step=True)
        for index, (sid, act) in enumerate(zip(next_ids, actions, strict=True)):
            try:
                self._step_row(self._row(sid), int(act), index, buffers)
            except Exception as err:
                if not inplace:  # do not leak the copies taken for this step
                    self.release(self._state(next_ids, None))
                raise self._error(index, len(ids), "step", err) from err
        out = buffers.tensordict(state.batch_size, state.device)
        if inplace and next_ids == ids:
            return state, out
        return self._state(next_ids, state.device), out

    def _step_row(self, row: GameRow, action: int, index: int, buffers: TickBuffers) -> None:
        ended = self._apply(row, action, buffers.reward[index])
        row.steps += 1
        if ended is None and 0 < self.max_episode_steps <= row.steps:
            ended = "truncated"
        if ended is not None:
            (buffers.terminated if ended == "terminated" else buffers.truncated)[index] = True
            self._write_score(row, buffers.score[index])
            if buffers.final_obs is not None:
                self._write_final_obs(row, buffers.final_obs[index])
                self._write_seat_truncated(row, ended == "truncated", buffers.seat_truncated[index])
            self._restart(row)
            row.steps = 0
        self._write_view(row, index, buffers)

    def _inplace_ids(self, ids: list[int]) -> list[int]:
        """Keep each id once; a row repeating an earlier row's id (an expanded state) gets its own copy."""
        seen: set[int] = set()
        out = []
        for sid in ids:
            out.append(self._register(self._copy_row(self._row(sid))) if sid in seen else sid)
            seen.add(sid)
        return out

    def _error(self, index: int, num: int, call: str, err: Exception) -> EnvError:
        detail = " ".join(str(err).split())
        return EnvError(self.spec.name, index, num, f"raised {type(err).__name__} in {call}: {detail}")


def one_line(err: BaseException) -> str:
    """An exception as one line: its type and its message with whitespace collapsed."""
    return " ".join(f"{type(err).__name__}: {err}".split())


def close_names(name: str, names: Any, limit: int = 3) -> str:
    """`` (close: a, b)`` for the names most like ``name``, or an empty string."""
    import difflib

    matches = difflib.get_close_matches(name, list(names), n=limit, cutoff=0.5)
    return f" (close: {', '.join(matches)})" if matches else ""
