"""``SelfPlayCollector``: collects a multi-seat turn-based game with one shared learning policy (docs/guides/games.md).

Every tick the learning policy acts for all rows at once (one batched forward); each row's action is then
replaced by the action of the player its acting seat belongs to in that game (a bot, a checkpoint, a league
snapshot: each called once per tick on its own rows only, no per-row Python). Rows whose acting seat is the
learning policy are flagged ``learner``: only those train.

A rollout is ``[S + T, B]``: ``T`` ticks of play, after ``S`` carried rows. A learning decision whose seat neither
decides again nor sees its game end before the rollout ends is open (``objectives/seat_credit.py``): it is not
trained in its own rollout but carried, with the reward its seat received so far, into the next one as carried row
``seat`` of that game, where its credit is complete. Carried rows are flagged ``carried`` (they are not new env
steps; they were collected by the previous policy, so ``policy/lag`` reads 1).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.collector import Policy
from rl_lightning.data.collector_base import CollectorBase
from rl_lightning.data.episode_stats import FinishedEpisodes
from rl_lightning.data.league import LEAGUE, League, SeatPlayers, parse_seats, player_field
from rl_lightning.envs.base import BatchedEnv
from rl_lightning.envs.games.bots import check_engine_players, needs_engine_state
from rl_lightning.envs.games.bots.probe import check_bot_fits
from rl_lightning.errors import ConfigError
from rl_lightning.lineage import check_checkpoint_plays
from rl_lightning.objectives.seat_credit import open_tails
from rl_lightning.processes import stop

LEARNER = "learner"  # bool: the acting seat is the learning policy (only these rows train)
CARRIED = "carried"  # bool: an open decision carried over from the previous rollout
PLAYER = "player"  # int64: the id of the player who acted (0: the learning policy)
_STEP_KEYS = (keys.REWARD, keys.TERMINATED, keys.TRUNCATED, keys.FINAL_OBS, keys.SEAT_TRUNCATED)


class SelfPlayCollector(CollectorBase):
    """Steps a multi-seat ``BatchedEnv`` with the learning policy and the seat map's other players.

    Episode stats are per learning seat: ``episode_return`` is the mean, over finished games and their learning
    seats, of what the seat received in the game; where the env reports a score (``game_score``), its mean over the
    same seats as ``game_score``, or for Hearts as ``points_per_hand`` (points taken per hand, lower is better).

    Args:
        env: the batched multi-seat env (owned from now on).
        players: who plays each seat (``SeatPlayers``, bound to the module).
        seed: seeds the action-sampling generator.
    """

    live_keys = ("obs",)
    _obs: TensorDict | None

    def __init__(self, env: BatchedEnv, players: SeatPlayers, seed: int = 0) -> None:
        super().__init__(env, seed)
        self.players = players
        self.num_seats = env.spec.num_seats
        self._episode_return = torch.zeros(env.num_envs, self.num_seats, device=env.device)
        self.scores = FinishedEpisodes(env.device)
        self._player: torch.Tensor | None = None
        self._carry: TensorDict | None = None

    def reset_episodes(self) -> None:
        super().reset_episodes()
        self._player = None
        self._carry = None

    @torch.no_grad()
    def rollout(self, policy: Policy, num_steps: int, policy_version: int) -> TensorDict:
        """``num_steps`` ticks; returns the ``[S + num_steps, num_envs]`` rollout (carried rows first)."""
        start = time.perf_counter()
        if self._obs is None:
            self._obs = self.env.reset()
            self._player = self.players.assign(self.num_envs)
        self.players.release(self._player)  # a retired league snapshot no game still plays is dropped
        seats, opponents = self.num_seats, self.players.acting()
        storage: dict[str, Any] = {}
        finished: list[tuple[torch.Tensor, ...]] = []
        for t in range(num_steps):
            stop.check()  # a stop request ends the rollout here; the checkpoint is the last update's
            obs = self._obs
            acted = policy(obs, self.generator)
            player = self._player.gather(1, obs[keys.SEAT].unsqueeze(1)).squeeze(1)
            action = acted[keys.ACTION]
            for player_id, actor in opponents:
                action = self._opponent_act(actor, player == player_id, obs, action)
            out = self.env.step(action)
            row = {**dict(obs.items()), **dict(acted.items()), keys.ACTION: action, PLAYER: player}
            row.update({key: out[key] for key in _STEP_KEYS if key in out})
            if not storage:  # carried rows first, then the ticks: written in place, no stacking copies
                storage = {key: _empty_like_rows(value, seats + num_steps) for key, value in row.items()}
            for key, value in row.items():
                storage[key][seats + t] = value
            finished.append(self._finish_games(out))
            next_obs = out.select(*obs.keys(include_nested=False), strict=False)
            next_obs[keys.IS_FIRST] = out[keys.IS_FIRST]
            self._obs = next_obs
        self._count_finished(finished)
        batch = TensorDict(storage, batch_size=[seats + num_steps, self.num_envs], device=self.env.device)
        self.env.watch(_finite_view(batch[seats:]))
        self.env.check_outputs()
        batch[keys.POLICY_VERSION] = torch.full(batch.batch_size, policy_version, dtype=torch.int64,
                                                device=self.env.device)  # fmt: skip
        batch[LEARNER] = batch[PLAYER] == 0
        carried = torch.arange(seats + num_steps, device=self.env.device).unsqueeze(1) < seats
        batch[CARRIED] = carried.expand(batch.batch_size).clone()
        batch[:seats] = self._carried(batch[seats:])
        self._carry = self._open_rows(batch)
        self.last_collect_seconds = time.perf_counter() - start
        return batch

    @property
    def games_under_way(self) -> bool:
        """Whether games are in progress (not before the first rollout, nor after ``reset_episodes``): only those
        may still play a snapshot retired from the league."""
        return self._player is not None

    def _opponent_act(self, actor: Any, mine: torch.Tensor, obs: TensorDict, action: torch.Tensor) -> torch.Tensor:
        """``action`` with the rows ``mine`` played by ``actor``, which sees only those rows (a league snapshot or a
        bot costs its own share of the batch; a search bot, ``needs_engine_state``, also gets their engine states).

        One ``nonzero`` per opponent and tick: a host sync on a GPU, but game envs step on the host anyway."""
        rows = mine.nonzero().squeeze(-1)
        if len(rows) == 0:
            return action
        engine = {}
        if needs_engine_state(getattr(actor, "bot", None)):
            engine["engine_states"] = [self.env.env.engine_state(self.env.state, i) for i in rows.tolist()]
        return action.index_put((rows,), actor(obs[rows], self.generator, **engine).to(action.dtype))

    def _finish_games(self, out: TensorDict) -> tuple[torch.Tensor, ...]:
        """The games that ended on this tick (their returns, lengths, scores, learning seats); draws their next
        players."""
        done = out[keys.TERMINATED] | out[keys.TRUNCATED]
        self._episode_return += out[keys.REWARD]
        self._episode_length += 1
        learning = done.unsqueeze(-1) & (self._player == 0)
        ended = (self._episode_return.clone(), self._episode_length.clone(), out.get("game_score", None), learning)
        self._episode_return.masked_fill_(done.unsqueeze(-1), 0.0)
        self._episode_length.masked_fill_(done, 0.0)
        self._player = torch.where(done.unsqueeze(-1), self.players.assign(self.num_envs), self._player)
        return ended

    def _count_finished(self, finished: list[tuple[torch.Tensor, ...]]) -> None:
        """Fold a rollout's finished games into the episode stats (once per rollout: the metrics cost per call)."""
        returns, lengths, scores, learning = zip(*finished)
        learning = torch.stack(learning)
        lengths = torch.stack(lengths).unsqueeze(-1)
        self.finished.update(torch.stack(returns), lengths, learning)
        if scores[0] is not None:
            self.scores.update(torch.stack(scores), lengths, learning)

    def _carried(self, ticks: TensorDict) -> TensorDict:
        """The ``[S, B]`` carried rows: last rollout's open learning decisions (none yet: rows that never train)."""
        if self._carry is not None:
            return self._carry
        template = torch.zeros(self.num_seats, dtype=torch.int64, device=self.env.device)
        carry = ticks[template].clone()  # shaped like a tick; marked as not learning, so it never trains
        carry[keys.SEAT] = torch.arange(self.num_seats, device=self.env.device).unsqueeze(1).expand_as(carry[keys.SEAT])
        carry[keys.REWARD].zero_()
        _clear_ends(carry)
        carry[LEARNER].zero_()
        carry[CARRIED].fill_(True)
        return carry

    def _open_rows(self, batch: TensorDict) -> TensorDict:
        """The open learning decisions at the end of ``batch``, as next rollout's carried rows."""
        seats = self.num_seats
        done = batch[keys.TERMINATED] | batch[keys.TRUNCATED]
        row, has, partial = open_tails(batch[keys.SEAT], batch[keys.REWARD], done, seats)
        games = torch.arange(self.num_envs, device=row.device).expand(seats, -1)
        carry = batch[row.T, games].clone()  # [S, B]: carried row j of game b is seat j's open decision
        has = has.T & carry[LEARNER]
        carry[keys.SEAT] = torch.arange(seats, device=row.device).unsqueeze(1).expand(seats, self.num_envs)
        eye = torch.eye(seats, dtype=partial.dtype, device=partial.device).unsqueeze(1)  # [S, 1, S]
        carry[keys.REWARD] = (partial.T * has).unsqueeze(-1) * eye
        _clear_ends(carry)
        carry[LEARNER] = has
        carry[CARRIED].fill_(True)
        return carry

    def episode_stats(self) -> dict[str, torch.Tensor]:
        stats = super().episode_stats()
        if self.scores.updated:  # Hearts: points taken per hand (lower is better); other games: their score
            name = "points_per_hand" if getattr(self.env.env, "score_name", "") == "points" else "game_score"
            stats[name] = self.scores.compute()["episode_return"]
            self.stat_counts[name] = self.scores.count()
            self.scores.reset()
        return stats

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.players.league is not None:
            state["league_generator"] = self.players.league.generator.get_state()
        if "env_state" in state and self._player is not None:
            state["player"] = self._player.clone()
            if self.players.league is not None:
                state["league_retired"] = self.players.league.retired_state_dict()
            if self._carry is not None:
                state["carry"] = self._carry.to_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if "league_generator" in state and self.players.league is not None:
            self.players.league.generator.set_state(state["league_generator"])
        if "player" in state:
            self._player = state["player"].to(self.env.device)
            if state.get("league_retired") and self.players.league is not None:
                self.players.league.load_retired_state_dict(state["league_retired"])
            if "carry" in state:
                self._carry = TensorDict(state["carry"], batch_size=[self.num_seats, self.num_envs]).to(self.env.device)


class SelfPlay:
    """What ``OnPolicyDataModule`` adds for a multi-seat game: the seat map, the league and their checkpointing.

    Built at the datamodule's construction, so a bad seat map, a bot that does not import or one that does not fit
    the game (``check_bot_fits``: one call on the game's first observations) fails before any work. Seats are
    numbers, or the env's agent names where it has them (PettingZoo: ``{player_1: random}``).
    """

    def __init__(self, env: Any, seats: dict[Any, Any] | None, league: dict[str, Any] | None) -> None:
        spec = env.spec
        specs = parse_seats(seat_numbers(seats, env), spec.num_seats, repr(spec.name))
        wants_league = league is not None or LEAGUE in specs
        self.league = League(**(league or {})) if wants_league else None
        self.players = SeatPlayers(specs, self.league, torch.device("cpu"))
        self._collector: SelfPlayCollector | None = None  # this process's, where it collects (``collector``)
        for name, player in self.players.fixed_ids.items():
            actor = self.players.actors.get(player)
            if name.endswith(".ckpt"):  # a network of another game would fail at its first move, mid-rollout
                check_checkpoint_plays(name, spec, player_field(name, specs))
            elif getattr(actor, "bot", None) is not None:
                field = f"data.seats[{specs.index(name)}]={name!r}" if name in specs else f"data.league.bots: {name!r}"
                check_bot_fits(env, actor.bot, field)

    def collector(self, env: BatchedEnv, seed: int, module: Any) -> SelfPlayCollector:
        """The collector of ``env``; league draws are seeded from ``seed`` (each rank its own stream)."""
        if self.league is not None:
            self.league.generator.manual_seed(seed + 20_011)
        if module is not None:
            self.players.bind(module)
        bots = [getattr(actor, "bot", None) for actor in self.players.actors.values()]
        check_engine_players(env.env, bots, "data.seats/data.league.bots")  # a search bot refuses a PettingZoo env
        self._collector = SelfPlayCollector(env, self.players.to(env.device), seed=seed)
        return self._collector

    def before_rollout(self, module: Any) -> None:
        """Take a league snapshot when one is due. Where no game of this process is under way (the learner whose
        actor processes collect, each with its own mirror of the league), a snapshot leaving the pool is dropped at
        once: no collector here would ever ``release`` it."""
        if self.league is None:
            return
        self.league.maybe_snapshot(module)
        if self._collector is None or not self._collector.games_under_way:
            self.league.drop_retired()

    def state_dict(self) -> dict[str, Any] | None:
        """The league's pool (the same on every rank); its per-rank generator lives in the collector's state."""
        return None if self.league is None else self.league.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None, module: Any) -> None:
        if self.league is not None and state is not None:
            self.league.load_state_dict(state, module)


def make_selfplay(env: Any, seats: dict[Any, Any] | None, league: dict[str, Any] | None) -> SelfPlay | None:
    """``SelfPlay`` for a multi-seat env (the core ``TorchEnv``); ``None`` for a single-agent one (where a seat map
    is refused)."""
    spec = env.spec
    if spec.num_seats > 1:
        return SelfPlay(env, seats, league)
    for name, value in (("seats", seats), ("league", league)):
        if value is not None:
            raise ConfigError(
                f"data.{name}={value!r} applies to multi-seat games, but {spec.name!r} has one seat; remove it"
            )
    return None


def seat_numbers(seats: dict[Any, Any] | None, env: Any) -> dict[Any, Any] | None:
    """``seats`` with the env's agent names (``PettingZooEnv.agents``: ``player_1``) replaced by their seat numbers;
    an unknown name is refused in one line listing the names."""
    names = list(getattr(env, "agents", None) or [])
    if not seats or not names:
        return seats
    out = {}
    for key, value in seats.items():
        if isinstance(key, str) and not key.strip().lstrip("-").isdigit():
            if key not in names:
                raise ConfigError(f"data.seats names seat {key!r}, but {env.spec.name!r} has seats 0..{len(names) - 1} "
                                  f"named {names}; key the seat map by those numbers or names")  # fmt: skip
            key = names.index(key)
        if key in out or str(key) in map(str, out):
            raise ConfigError(f"data.seats names seat {key} twice (by number and by agent name); name it once")
        out[key] = value
    return out


def _clear_ends(carry: TensorDict) -> None:
    """A carried row ends no game: its end flags are cleared (the game's end, if any, lies in the next rollout)."""
    for key in (keys.TERMINATED, keys.TRUNCATED, keys.SEAT_TRUNCATED):
        if key in carry:
            carry[key].zero_()


def _empty_like_rows(value: Any, rows: int) -> Any:
    """Uninitialised ``[rows, *value.shape]`` storage of ``value``'s dtype and device (a tensor or a TensorDict)."""
    if isinstance(value, TensorDict):
        return TensorDict({k: _empty_like_rows(v, rows) for k, v in value.items()}, [rows, *value.batch_size],
                          device=value.device)  # fmt: skip
    return torch.empty(rows, *value.shape, dtype=value.dtype, device=value.device)


def _finite_view(ticks: TensorDict) -> TensorDict:
    """What the NaN/inf watch reads: rewards, and float observations summed per row in their own dtype first.

    A game observation is thousands of features (Hearts: 5,088); the watch's float64 sum over all of them cost a
    third of a rollout. A float32 sum is NaN/inf when a term is, so the check is the same (a false alarm would need
    a row summing past 3e38)."""
    view = ticks.select(keys.REWARD, keys.FINAL_OBS, strict=False)
    for key in (keys.OBS, keys.FINAL_OBS):
        value = ticks.get(key, None)
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            view[key] = value.flatten(len(ticks.batch_size)).sum(-1, keepdim=True)
        elif value is not None:
            view[key] = value
    return view
