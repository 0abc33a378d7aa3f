"""Who plays each seat of a self-play game: the seat map, the opponents it names, and the league of past selves.

A seat map (``data.seats``) maps seat numbers to players: ``self`` (the learning policy, whose decisions train),
``league`` (a frozen snapshot of the learning policy, sampled per game from the league's pool), ``random``
(uniform over legal actions), a bot class or callable path (``pkg.mod.Class`` or ``pkg.mod:Class``: the class is
instantiated without arguments; a bot is ``bot(obs, action_mask, seat, generator) -> action [B]``), or a
checkpoint file (``*.ckpt``: that policy, frozen). Unlisted seats are ``self``.

Each game's players are drawn when it starts, as an int64 ``[B, S]`` table of player ids: 0 is the learning
policy, ``1..P`` the fixed opponents of the seat map (one per distinct entry), ``P+1+n`` the league's n-th snapshot
(counting from 0 over the run). A snapshot's id is never reused, and a game keeps the weights it started with: when
the pool is full the oldest snapshot leaves it (no new game draws it) but plays on in the games that drew it, and is
dropped once none of them is still running (``League.release``); where the games are played by actor processes, the
learner's league drops it at once (``League.drop_retired``), and each actor's mirror releases its own.
With ``league.share = p``, a share ``p`` of games keep one uniformly chosen ``self`` seat learning and give every
other ``self`` seat the game's league snapshot (one snapshot per game, uniform over the pool). ``league.bots``
(``{random: 0.1, pkg.mod:Bot: 0.1}``) gives further shares of games to fixed opponents the same way: pure self-play
never meets a weak player, and a share of games against one teaches the policy to punish its mistakes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.games.bots import nearest_class_path
from rl_lightning.errors import ConfigError
from rl_lightning.lineage import constructor_args

SELF, LEAGUE, RANDOM = "self", "league", "random"
#: An opponent as the collector calls it: ``(obs, generator) -> action [B]``.
Actor = Callable[[TensorDict, torch.Generator], torch.Tensor]


def parse_seats(seats: dict[Any, Any] | None, num_seats: int, game: str) -> list[str]:
    """The player spec of every seat (unlisted seats are ``self``); one-line ``ConfigError`` on bad input."""
    specs = [SELF] * num_seats
    for key, value in (seats or {}).items():
        try:
            seat = int(key)
        except (TypeError, ValueError):
            seat = -1
        if not 0 <= seat < num_seats:
            raise ConfigError(
                f"data.seats names seat {key!r}, but {game} has seats 0..{num_seats - 1}; map only those seats"
            )
        specs[seat] = _check_spec(str(value).strip(), seat)
    if SELF not in specs:
        raise ConfigError(
            f"data.seats={dict(seats or {})!r} maps no seat to 'self', so nothing would train; map at least one"
        )
    return specs


def _check_spec(spec: str, seat: int, field: str = "") -> str:
    where = field or f"data.seats[{seat}]"
    if field and spec in (SELF, LEAGUE):
        raise ConfigError(f"{where} names {spec!r}; give fixed opponents only: random or a bot class path")
    if spec in (SELF, LEAGUE, RANDOM) or spec.endswith(".ckpt") or "." in spec or ":" in spec:
        return spec
    raise ConfigError(
        f"{where}={spec!r} is not a seat kind; use self, league, random, a bot class path "
        "(pkg.module.Class or pkg.module:Class) or a checkpoint file (*.ckpt)"
    )


def random_actor(obs: TensorDict, generator: torch.Generator) -> torch.Tensor:
    """Uniform over the legal actions of each row (Gumbel-max over ``action_mask``)."""
    mask = obs[keys.ACTION_MASK]
    noise = torch.rand(mask.shape, generator=generator, device=mask.device)
    return noise.masked_fill(~mask, -1.0).argmax(-1)


def load_bot(path: str, seat: int) -> Actor:
    """Import ``pkg.mod.Name``/``pkg.mod:Name``; a class is instantiated without arguments; wrap as an ``Actor``."""
    module_name, _, attr = path.rpartition(":") if ":" in path else path.rpartition(".")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as error:
        close = nearest_class_path(path)
        example = "give an importable class or callable path, e.g. rl_lightning.envs.games.bots.HeartsHeuristic"
        fix = f"did you mean {close}?" if close else example
        raise ConfigError(
            f"data.seats[{seat}]={path!r}: cannot import the bot ({type(error).__name__}: {error}); {fix}"
        ) from None
    bot = target() if isinstance(target, type) else target
    if not callable(bot):
        raise ConfigError(f"data.seats[{seat}]={path!r} is not callable; a bot is bot(obs, action_mask, seat, gen)")

    def actor(obs: TensorDict, generator: torch.Generator, **engine: Any) -> torch.Tensor:
        return bot(obs[keys.OBS], obs[keys.ACTION_MASK], obs[keys.SEAT], generator, **engine)

    actor.bot = bot  # type: ignore[attr-defined]  # a search bot (needs_engine_state) is called on its rows only
    return actor


def check_checkpoint(path: str, field: str) -> None:
    """Refuse a checkpoint player whose file is missing, before any work starts (``field``: ``data.seats[1]``)."""
    if not Path(path).is_file():
        raise ConfigError(f"{field}={path!r}: no such checkpoint file; give the path of a .ckpt")


def player_field(spec: str, specs: list[str]) -> str:
    """The setting that names the fixed opponent ``spec``: its seat (``data.seats[1]``), else ``data.league.bots``."""
    return f"data.seats[{specs.index(spec)}]" if spec in specs else "data.league.bots"


def frozen_copy(module: Any, state: dict[str, torch.Tensor] | None = None) -> Any:
    """A new module of ``module``'s class and hyper-parameters with ``state`` (default: its current weights),
    in eval mode without gradients: a player that acts but never learns."""
    copy = type(module)(**constructor_args(module.hparams, type(module)))
    copy.load_state_dict(module.state_dict() if state is None else state)
    copy.requires_grad_(False).eval()
    return copy.to(module.device)


class ModuleActor:
    """A frozen module (a league snapshot, a checkpoint) as an ``Actor``: its stochastic training policy.

    A frozen player never learns, so it never needs its value: a module that computes its critic while acting (a
    PPO whose actor and critic share a CNN) is told not to (``_value_when_acting``)."""

    def __init__(self, module: Any) -> None:
        self.module = module
        if getattr(module, "_value_when_acting", False):
            module._value_when_acting = False

    def __call__(self, obs: TensorDict, generator: torch.Generator) -> torch.Tensor:
        return self.module.act(obs, generator)[keys.ACTION]


class League:
    """A pool of the last ``size`` snapshots of the learning policy, one taken every ``snapshot_every_n_updates``.

    Checkpointed: the pool's weights (``state_dict``, the same on every rank) and, per rank with the collector,
    the generator that draws the games' snapshots and league games and the retired snapshots its games still play
    (``retired_state_dict``), so a resumed run continues the same opponent stream.

    Args:
        size: snapshots kept (the oldest is dropped first).
        snapshot_every_n_updates: updates between snapshots (the first is the initial policy).
        share: share of games in which the ``self`` seats but one play the game's snapshot.
        bots: ``{opponent: share}``: further shares of games in which the ``self`` seats but one play a fixed
            opponent (``random`` or a bot class path, as in the seat map); ``share`` plus these at most 1.
    """

    def __init__(
        self,
        size: int = 5,
        snapshot_every_n_updates: int = 10,
        share: float = 0.0,
        bots: dict[str, float] | None = None,
    ) -> None:
        bots = dict(bots or {})
        checks = [
            ("size", isinstance(size, int) and size >= 1, "use >= 1 snapshots"),
            ("snapshot_every_n_updates", isinstance(snapshot_every_n_updates, int) and snapshot_every_n_updates >= 1,
             "use >= 1"),
            ("share", 0.0 <= share <= 1.0, "use a share of games in [0, 1]"),
            ("bots", all(0.0 <= q <= 1.0 for q in bots.values()) and share + sum(bots.values()) <= 1.0,
             "give each opponent a share in [0, 1], with share + the bots' shares <= 1"),
        ]  # fmt: skip
        for name, ok, fix in checks:
            if not ok:
                value = {"size": size, "snapshot_every_n_updates": snapshot_every_n_updates, "share": share,
                         "bots": bots}[name]  # fmt: skip
                raise ConfigError(f"data.league.{name}={value!r} is invalid: {fix}")
        for name in bots:
            _check_spec(str(name), -1, "data.league.bots")
        self.size, self.every, self.share, self.bots = size, snapshot_every_n_updates, share, bots
        self.slots: list[Any] = []  # the pool: frozen modules, oldest first
        self.versions: list[int] = []  # the policy_version each slot was taken at
        self.ids: list[int] = []  # each slot's snapshot number n (player id ``league_first_id + n``), never reused
        self.retired: dict[int, Any] = {}  # snapshot number -> a snapshot out of the pool that games still play
        self.taken = 0  # snapshots taken so far: the next one's number
        self.last_snapshot_update = -1
        self.generator = torch.Generator()
        self._spare: list[Any] = []  # released modules, reused for the next snapshots
        self._id_table: tuple[list[int], torch.Tensor] = ([], torch.zeros(1, dtype=torch.int64))

    def maybe_snapshot(self, module: Any) -> None:
        """Add ``module``'s current weights when ``snapshot_every_n_updates`` updates have passed."""
        if self.last_snapshot_update >= 0 and module.updates - self.last_snapshot_update < self.every:
            return
        self.last_snapshot_update = module.updates
        self._add(module, None, module.policy_version)

    def _add(self, module: Any, state: dict[str, torch.Tensor] | None, version: int) -> None:
        if len(self.slots) >= self.size:  # the oldest leaves the pool; games that drew it play it on (``release``)
            oldest = self.versions.index(min(self.versions))
            self.retired[self.ids.pop(oldest)] = self.slots.pop(oldest)
            self.versions.pop(oldest)
        if self._spare:
            snapshot = self._spare.pop()
            snapshot.load_state_dict(module.state_dict() if state is None else state)
        else:
            snapshot = frozen_copy(module, state)
        self.slots.append(snapshot)
        self.versions.append(version)
        self.ids.append(self.taken)
        self.taken += 1

    def pool_ids(self) -> torch.Tensor:
        """The pool's snapshot numbers, int64 on the CPU (``[taken]`` while the pool is empty)."""
        if self._id_table[0] != self.ids:
            self._id_table = (list(self.ids), torch.tensor(self.ids or [self.taken], dtype=torch.int64))
        return self._id_table[1]

    def snapshots(self) -> list[tuple[int, Any]]:
        """Every snapshot that may play now, as ``(number, module)``: the pool's, then the retired ones."""
        return [*zip(self.ids, self.slots), *self.retired.items()]

    def release(self, players: torch.Tensor, first_id: int) -> None:
        """Drop the retired snapshots that no game of the ``players`` table (player ids) still plays.

        One host sync per call, and only while a retired snapshot is kept (after the pool was full)."""
        if not self.retired:
            return
        numbers = list(self.retired)
        ids = torch.tensor(numbers, dtype=players.dtype, device=players.device) + first_id
        for number, playing in zip(numbers, torch.isin(ids, players).tolist()):
            if not playing:
                self._spare.append(self.retired.pop(number))

    def drop_retired(self) -> None:
        """Let go of every retired snapshot: for a league no game of this process plays (the learner's, while actor
        processes collect with mirrors of it), where ``release`` is never called.

        Unlike ``release`` it does not recycle them for later snapshots: a background ``GameEvaluation`` may still
        be playing one (its panel holds its own reference until its games end), and reloading that module's weights
        would change its opponent mid-match."""
        self.retired.clear()

    def state_dict(self) -> dict[str, Any]:
        """The pool (its weights, versions and snapshot numbers) and the snapshot clock; the retired snapshots
        differ per rank and are saved with each rank's collector (``retired_state_dict``)."""
        return {
            "weights": [{k: v.cpu() for k, v in slot.state_dict().items()} for slot in self.slots],
            "versions": list(self.versions),
            "ids": list(self.ids),
            "taken": self.taken,
            "last_snapshot_update": self.last_snapshot_update,
        }

    def load_state_dict(self, state: dict[str, Any], module: Any) -> None:
        self.slots, self.versions, self.retired, self._spare = [], [], {}, []
        for weights, version in zip(state["weights"], state["versions"]):
            self.slots.append(frozen_copy(module, weights))
            self.versions.append(version)
        # A checkpoint from before snapshot numbers named the slots by position.
        self.ids = [int(n) for n in state.get("ids", range(len(self.slots)))]
        self.taken = int(state.get("taken", max(self.ids, default=-1) + 1))
        self.last_snapshot_update = int(state["last_snapshot_update"])

    def retired_state_dict(self) -> dict[int, dict[str, torch.Tensor]]:
        """The retired snapshots' weights (this rank's games still play them)."""
        return {n: {k: v.cpu() for k, v in slot.state_dict().items()} for n, slot in self.retired.items()}

    def load_retired_state_dict(self, state: dict[int, dict[str, torch.Tensor]]) -> None:
        """Restore the retired snapshots (after ``load_state_dict``: they are built like the pool's)."""
        self.retired = {int(n): frozen_copy(self.slots[0], weights) for n, weights in state.items()}


class SeatPlayers:
    """The players of every seat, and the draw of each new game's players (``assign``).

    Args:
        specs: ``parse_seats`` output.
        league: the league (needed when a seat is ``league`` or ``league.share > 0``), else ``None``.
        device: where the player tables live.
    """

    def __init__(self, specs: list[str], league: League | None, device: torch.device) -> None:
        self.specs = specs
        self.league = league
        self.device = device
        league_bots = list(league.bots) if league is not None else []
        fixed = [spec for spec in dict.fromkeys([*specs, *league_bots]) if spec not in (SELF, LEAGUE)]
        self.fixed_ids = {spec: 1 + i for i, spec in enumerate(fixed)}
        self.actors: dict[int, Actor] = {}
        for spec, player in self.fixed_ids.items():  # bots import now: a bad path fails before any work
            seat = specs.index(spec) if spec in specs else -1
            if spec == RANDOM:
                self.actors[player] = random_actor
            elif spec.endswith(".ckpt"):
                check_checkpoint(spec, player_field(spec, specs))  # loaded by ``bind``, with the learner's class
            else:
                self.actors[player] = load_bot(spec, seat)
        seat_ids = [0 if s == SELF else self.fixed_ids.get(s, -1) for s in specs]  # -1: the game's league snapshot
        self.base = torch.tensor(seat_ids, dtype=torch.int64, device=device)
        self.self_seats = torch.tensor([s == SELF for s in specs], device=device)

    @property
    def league_first_id(self) -> int:
        return 1 + len(self.fixed_ids)

    def bind(self, module: Any) -> None:
        """Load the checkpoint seats, with ``module``'s class."""
        for spec, player in self.fixed_ids.items():
            if spec.endswith(".ckpt"):
                loaded = type(module).load_from_checkpoint(spec, map_location=module.device, weights_only=False)
                self.actors[player] = ModuleActor(loaded.requires_grad_(False).eval())

    def to(self, device: torch.device) -> SeatPlayers:
        """Keep the player tables on ``device`` (the env's)."""
        self.device = torch.device(device)
        self.base, self.self_seats = self.base.to(self.device), self.self_seats.to(self.device)
        return self

    def acting(self) -> list[tuple[int, Actor]]:
        """Every player but the learning policy that may act now: fixed opponents, then the league's snapshots."""
        players = list(self.actors.items())
        if self.league is not None:
            first = self.league_first_id
            players += [(first + n, ModuleActor(slot)) for n, slot in self.league.snapshots()]
        return players

    def release(self, players: torch.Tensor) -> None:
        """Drop the league's retired snapshots that no game of the ``players`` table still plays."""
        if self.league is not None:
            self.league.release(players, self.league_first_id)

    def assign(self, num_games: int) -> torch.Tensor:
        """Draw the players of ``num_games`` new games: int64 ``[num_games, S]`` player ids."""
        players = self.base.expand(num_games, -1).clone()
        league = self.league
        if league is None:
            return players
        gen = league.generator
        pool = league.pool_ids()
        snapshot = self.league_first_id + pool[torch.randint(len(pool), (num_games, 1), generator=gen)].to(self.device)
        # A league game keeps one uniformly drawn ``self`` seat learning; the other ``self`` seats play the snapshot
        # (or, in the bots' shares of games, that bot). One draw picks the game's kind: [0, share) a snapshot.
        kind = torch.rand(num_games, 1, generator=gen).to(self.device)
        league_game = kind < league.share
        keeper = torch.rand(num_games, len(self.specs), generator=gen).to(self.device)
        keeper = keeper.masked_fill(~self.self_seats, -1.0).argmax(-1, keepdim=True)
        seats = torch.arange(len(self.specs), device=self.device)
        others = self.self_seats & (seats != keeper)
        players = torch.where((players < 0) | (league_game & others), snapshot, players)
        low = league.share
        for spec, share in league.bots.items():
            bot_game = (kind >= low) & (kind < low + share)
            players = torch.where(bot_game & others, torch.full_like(players, self.fixed_ids[spec]), players)
            low += share
        return players
