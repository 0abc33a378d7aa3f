"""``GameEvaluation``: a game agent against a panel of opponents, seats rotated, duplicate deals, intervals, tests
and a rating table, keyed on updates or env steps; ``rl-lightning test`` plays the same panel from a checkpoint."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from rl_lightning.callbacks.background_run import BackgroundRun, plays_beside_training
from rl_lightning.callbacks.cadence import Cadence
from rl_lightning.data.league import frozen_copy
from rl_lightning.envs.base import TorchEnv
from rl_lightning.errors import ConfigError
from rl_lightning.games import panel as panels
from rl_lightning.games.exploitability import MAX_STATES, InfoStateTable
from rl_lightning.games.match import PolicyBot, check_engine_players
from rl_lightning.games.search import NetworkMCTS
from rl_lightning.games.summary import match_metrics
from rl_lightning.reporting.env_step_log import log_at_env_step, publish_to_callbacks


class GameEvaluation(Callback):
    """Plays the policy against each opponent of ``opponents`` every ``every_n_updates`` / ``every_n_env_steps``.

    Fires in ``on_train_batch_end`` (after the update) each time the counter crosses a multiple, and at the end of
    training unless the last update was just evaluated. ``rl-lightning validate``/``test`` on a multi-seat game play
    the same panel once through ``measure`` (the ``EvalRequests`` callback calls it via ``game_evaluation_for``),
    logged under ``eval/``/``test/``.

    Each match seats the policy in every seat in turn (``num_games / num_seats`` deals per seat) against the
    opponent in all other seats; with ``duplicate`` every rotation and the baseline replay the same deals
    (``rl_lightning.games.match``). Logged per opponent, one point per evaluation at its env step
    (``rl_lightning.games.summary`` defines each): ``eval/vs_<name>/points_per_hand`` (Hearts; other games
    ``<score>_per_game``) with ``_low``/``_high`` (95% interval), ``baseline_points_per_hand`` (the opponent in
    the policy's seats), ``p_value`` (paired over deals when duplicate, else Welch), ``games``, ``games_cut`` (games
    the env cut off at its step limit: no result, left out of every other number); two-seat games add
    ``win_rate``/``draw_rate``/``loss_rate`` with intervals, ``baseline_win_rate`` and ``p_value_win_rate``.
    These average the seats equally; ``<score>_seat<r>`` (and ``win_rate_seat<r>`` in two-seat games) break them
    down by the seat the policy sat in (seat 0 first). Intervals are clipped to the game's score range where the
    env gives one (``score_range``: OpenSpiel games).
    With ``rating_games > 0`` a round robin of the policy and the whole panel gives ``eval/rating/<name>`` (Elo,
    ``random`` = 0 when it plays; ``rl_lightning.games.rating``). The values also go to
    ``trainer.callback_metrics`` (``RLCheckpoint``/``EarlyStopping`` monitors). Every rank plays the same panels.
    With ``exploitability`` (two-player zero-sum OpenSpiel games small enough to enumerate) each evaluation also
    logs ``eval/exploitability`` and ``eval/nash_conv`` of the policy's action distribution (sampled, whatever
    ``deterministic`` says for the matches), by OpenSpiel's best
    response over every information state (``rl_lightning.games.exploitability``), and ``eval/exploitability_s``,
    its wall time. With ``search_simulations`` too, ``eval/search_exploitability`` and ``eval/search_nash_conv`` are
    those of the searching agent (``NetworkMCTS``'s move at every position: perfect-information games only).

    Args:
        every_n_updates: evaluate after every this many learner updates.
        every_n_env_steps: evaluate each time the env-step counter crosses a multiple of this.
        opponents: the panel: ``random``, ``heuristic`` (the game's bundled bot), ``league`` (each snapshot of the
            run's league), checkpoint files (``*.ckpt``) or bot class paths (``pkg.module:Class``).
        num_games: the policy's games against each opponent; a multiple of the game's seats.
        duplicate: replay each deal with the seats rotated (and for the baseline): paired tests, less variance.
        baseline: also play each deal with opponents only (``baseline_*`` and the p-values); ``false`` leaves them
            NaN and saves those games, most of an evaluation's cost against a search opponent (``OpenSpielMCTSBot``
            plays every move of a baseline game).
        rating_games: games per pair in the rating round robin (matches already played are reused); 0: no
            table; ``None``: ``num_games``.
        deterministic: act with the mode (``None``: the algorithm's evaluation default); also for league and
            checkpoint opponents.
        env: the game to play; ``None`` builds one like the datamodule's (same constructor arguments).
        seed: every evaluation replays the same deals from this seed.
        batch_size: games played at once.
        exploitability: also measure exploitability and NashConv; a game that is not two-player zero-sum, or has
            more than ``max_exploitability_states`` decision states, is refused at setup. ``opponents`` may then be
            ``[]`` (no matches).
        max_exploitability_states: the cap on the decision states enumerated (tic-tac-toe has 294,778).
        search_simulations: above 0, the policy plays through ``NetworkMCTS`` (``rl_lightning.games.search``):
            a tree search of this many simulations per move with the network's policy as prior and its value head
            at the leaves and the module's own search settings (AlphaZero's ``c_puct``; others: ``NetworkMCTS``'s
            defaults), so the panel shows what the searching agent plays (perfect-information OpenSpiel games
            only); 0 plays the network alone.
        background: play each evaluation beside training: a frozen copy of the policy is taken when one falls
            due and its games advance one tick at a time in a thread of the learner, only while the learner waits
            for its actors' rollouts (``data.num_actors``), so an evaluation no longer stalls collection. Its
            record is logged at the env step of that copy once its games end (after a later update), and reaches
            monitors (``RLCheckpoint``, ``EarlyStopping``) then; the next due evaluation and the end of training
            first wait for it. One that is still playing when a checkpoint is saved is played again, at the then
            current weights, after a resume. Needs actors and one device (otherwise evaluations play in the
            foreground, with a notice: the serial learner never waits); not with ``exploitability`` (one pass
            with no ticks to wait between).
    """

    def __init__(
        self,
        every_n_updates: int | None = None,
        every_n_env_steps: int | None = None,
        opponents: list[str] | None = None,
        num_games: int = 400,
        duplicate: bool = True,
        baseline: bool = True,
        rating_games: int | None = None,
        deterministic: bool | None = None,
        env: TorchEnv | None = None,
        seed: int = 12_345,
        batch_size: int = 256,
        exploitability: bool = False,
        max_exploitability_states: int = MAX_STATES,
        search_simulations: int = 0,
        background: bool = False,
    ) -> None:
        self.cadence = Cadence("GameEvaluation", every_n_updates, every_n_env_steps)
        self.opponents = [] if exploitability and opponents == [] else panels.check_opponents(
            ["random", "heuristic"] if opponents is None else opponents, "GameEvaluation")  # fmt: skip
        for name, value, least in (("num_games", num_games, 1), ("batch_size", batch_size, 1),
                                   ("rating_games", rating_games or 0, 0),
                                   ("search_simulations", search_simulations, 0)):  # fmt: skip
            if value < least:
                raise ConfigError(f"GameEvaluation: {name}={value} must be >= {least}")
        self.every_n_updates, self.every_n_env_steps = every_n_updates, every_n_env_steps
        self.num_games, self.duplicate, self.rating_games = num_games, duplicate, rating_games
        self.baseline = baseline
        self.deterministic, self.env, self.seed, self.batch_size = deterministic, env, seed, batch_size
        self.search_simulations = search_simulations
        if background and exploitability:
            raise ConfigError("GameEvaluation: background=true plays matches between the learner's waits, but "
                              "exploitability is one pass that cannot wait; set background: false")  # fmt: skip
        self.background = background
        self._in_background = False  # resolved at setup: ``background`` where the learner waits for actors
        self._pending: BackgroundRun | None = None
        self._copy: Any = None  # the frozen policy a background evaluation plays (weights reloaded each time)
        self._before_pending: tuple[int, int] | None = None  # (last_updates, cadence last_seen) before it started
        self.last_updates = -1
        self.eval_seconds = 0.0
        self.history: list[dict[str, float]] = []
        self._built_env: TorchEnv | None = None
        self._resolved_deterministic: bool | None = None  # ``deterministic`` as played (saved for ``load_policy``)
        self.exploitability, self.max_exploitability_states = exploitability, max_exploitability_states
        self._table: InfoStateTable | None = None

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(opponents=self.opponents, num_games=self.num_games)

    def should_evaluate(self, pl_module: Any) -> bool:
        """Cadence predicate: overridable, identical on every rank (counters are global)."""
        return self.cadence.due(pl_module)

    def check_datamodule(self, datamodule: Any) -> None:
        """Refuse, in one line, game settings or opponents that cannot play the datamodule's game (a bot written for
        another game fails its probe: ``check_bot_fits``). The CLI calls this before the trainer starts."""
        env = self.env if self.env is not None else getattr(datamodule, "env", None)
        if env is None:  # a datamodule without a game env: setup builds and checks what it plays
            return
        self._check_game(env)
        league = getattr(getattr(datamodule, "selfplay", None), "league", None)
        panels.check_checkpoint_opponents(self.opponents, env)  # loaded at setup; a file of another game fails now
        opponents = [spec for spec in self.opponents if not spec.endswith(".ckpt")]
        panels.resolve_panel(opponents, env, league, self.deterministic, torch.device("cpu"))

    def _plays_in_background(self, datamodule: Any, world_size: int) -> bool:
        """``background`` needs a learner that waits for actors, on one device; otherwise the evaluations play in
        the foreground, and a notice says why."""
        return self.background and plays_beside_training("GameEvaluation", datamodule, world_size)

    def _check_game(self, env: TorchEnv) -> None:
        """One-line refusals of a game this callback cannot judge: one seat, game counts that do not divide among
        the seats, or (with ``exploitability``) a game too large or not two-player zero-sum to enumerate."""
        seats = env.spec.num_seats
        if seats < 2:
            raise ConfigError(f"trainer.callbacks: GameEvaluation plays matches of multi-seat games, but "
                              f"{env.spec.name!r} has one seat; evaluate it with rl_lightning.callbacks.Evaluation "
                              "(--config callbacks/eval.yaml)")  # fmt: skip
        if self.exploitability and self._table is None:  # a game it cannot enumerate fails now too
            self._table = InfoStateTable(env, self.max_exploitability_states, "GameEvaluation")
        for name, games in (("num_games", self.num_games), ("rating_games", self.rating_games or 0)):
            if games % seats:
                fit = (games // seats + 1) * seats
                raise ConfigError(f"GameEvaluation: {name}={games} is not a multiple of the game's {seats} seats, "
                                  f"so the policy could not sit in each seat equally; use {fit}")  # fmt: skip

    @override
    def setup(self, trainer: pl.Trainer, pl_module: Any, stage: str) -> None:
        env = self.game_env(trainer)
        self._check_game(env)
        self._panel(trainer, env, pl_module)  # an opponent that cannot play fails now, before any training
        check_engine_players(env, [self._tested(pl_module)], "GameEvaluation.search_simulations")
        self._resolved_deterministic = pl_module.eval_deterministic if self.deterministic is None else \
            self.deterministic  # fmt: skip
        if stage == "fit" and self.background:
            self._in_background = self._plays_in_background(getattr(trainer, "datamodule", None), trainer.world_size)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: Any, stage: str) -> None:
        if self._pending is not None:  # the run ended (or failed) without waiting for it
            self._pending.abandon()
            self._pending = None
        if self._built_env is not None:
            self._built_env.close()
            self._built_env = None

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.sanity_checking:
            return
        if self._pending is not None and self._pending.done():
            self._log_pending(trainer)
        if self.should_evaluate(pl_module):
            if self._in_background:
                self._start_background(trainer, pl_module)
            else:
                self.evaluate(trainer, pl_module)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        if self._pending is not None:
            self._log_pending(trainer)
        if pl_module.updates > 0 and self.last_updates != pl_module.updates:
            self.evaluate(trainer, pl_module)  # the last one in the foreground: the run ends with its record

    def game_env(self, trainer: pl.Trainer) -> TorchEnv:
        """The game played: ``env``, or one built once like the datamodule's."""
        if self.env is not None:
            return self.env
        if self._built_env is None:
            self._built_env = trainer.datamodule.env.fresh()
        return self._built_env

    def evaluate(self, trainer: pl.Trainer, pl_module: Any) -> dict[str, float]:
        """Play the panel, log ``eval/*`` once at the current env step, and return the record."""
        if self._pending is not None:
            self._log_pending(trainer)
        start = time.perf_counter()
        record = self.measure(trainer, pl_module, "eval")
        self.eval_seconds += time.perf_counter() - start
        self.last_updates = pl_module.updates
        self._log(trainer, record, pl_module.env_steps, pl_module.updates)
        return record

    def _log(self, trainer: pl.Trainer, record: dict[str, float], env_steps: int, updates: int) -> None:
        publish_to_callbacks(trainer, record)
        log_at_env_step(trainer, record, env_steps)
        self.history.append({**record, "env_steps": float(env_steps), "updates": float(updates)})

    def _start_background(self, trainer: pl.Trainer, pl_module: Any) -> None:
        """Take a frozen copy of the policy now and play its panel in the learner's waits (``background``)."""
        if self._pending is not None:
            self._log_pending(trainer)
        if self._copy is None:
            self._copy = frozen_copy(pl_module)
        else:
            self._copy.load_state_dict(pl_module.state_dict())
        self._before_pending = (self.last_updates, pl_module.env_steps if self.cadence.counter == "env_steps"
                                else pl_module.updates)  # fmt: skip
        play = self._measurement(trainer, self._copy, "eval")  # the panel is resolved now, in this thread
        self._pending = BackgroundRun(play, pl_module.env_steps, pl_module.updates)
        self.last_updates = pl_module.updates

    def _log_pending(self, trainer: pl.Trainer) -> None:
        """Wait for the background evaluation (if still playing) and log its record at its own env step."""
        pending, self._pending = self._pending, None
        assert pending is not None
        start = time.perf_counter()
        try:
            record = pending.wait()
        finally:
            self.eval_seconds += time.perf_counter() - start  # the learner's time it took, not the thread's
            self._before_pending = None
        self._log(trainer, record, pending.env_steps, pending.updates)

    def measure(self, trainer: pl.Trainer, pl_module: Any, prefix: str = "eval") -> dict[str, float]:
        """Play the panel (and the rating round robin) once; ``{prefix}/vs_<name>/*`` and ``{prefix}/rating/*``."""
        return self._measurement(trainer, pl_module, prefix)()

    def _measurement(self, trainer: pl.Trainer, pl_module: Any, prefix: str) -> Callable[[], dict[str, float]]:
        """``measure``'s games with their players resolved now (the env, the league's snapshots as they are, the
        policy as a player); calling it plays them."""
        env = self.game_env(trainer)
        panel = self._panel(trainer, env, pl_module)
        policy = panels.Player(panels.POLICY, self._tested(pl_module))

        def play() -> dict[str, float]:
            was_training = pl_module.training
            pl_module.eval()
            try:
                return self._play(env, policy, panel, pl_module, prefix)
            finally:
                pl_module.train(was_training)

        return play

    def _play(
        self, env: TorchEnv, policy: Any, panel: list[panels.Player], pl_module: Any, prefix: str
    ) -> dict[str, float]:
        """The matches (and ratings, exploitability) of ``measure``: its record."""
        deals = self.num_games // env.spec.num_seats
        results = panels.play_panel(env, policy, panel, deals, self.seed, self.duplicate, self.batch_size,
                                    baseline=self.baseline)
        ratings = {}
        rating_games = self.num_games if self.rating_games is None else self.rating_games
        if rating_games and panel:
            played = {(panels.POLICY, name): result for name, result in results.items()}
            ratings = panels.rating_table(env, [policy, *panel], played, rating_games // env.spec.num_seats,
                                   self.seed, self.duplicate, self.batch_size)  # fmt: skip
        score_range = getattr(env, "score_range", None)  # the game's lowest and highest score, where it says
        metrics = {f"{prefix}/vs_{name}/{key}": value for name, result in results.items()
                   for key, value in match_metrics(result, score_range=score_range).items()}  # fmt: skip
        if self.exploitability:
            metrics.update(self._exploitability(env, pl_module, prefix))
        metrics.update({f"{prefix}/rating/{name}": value for name, value in ratings.items()})
        return metrics

    def _exploitability(self, env: TorchEnv, pl_module: Any, prefix: str) -> dict[str, float]:
        """``{prefix}/exploitability``, ``{prefix}/nash_conv`` and ``{prefix}/exploitability_s`` (its wall time)."""
        start = time.perf_counter()
        if self._table is None:
            self._table = InfoStateTable(env, self.max_exploitability_states, "GameEvaluation")
        was_training = pl_module.training
        pl_module.eval()
        try:
            values = self._table.evaluate(pl_module)  # the action distribution, whatever the matches play
            if self.search_simulations:  # the agent as it plays: its search's move at every position
                probabilities = self._table.search_probabilities(self._tested(pl_module))
                values.update({f"search_{k}": v for k, v in self._table.nash_conv(probabilities).items()})
        finally:
            pl_module.train(was_training)
        values["exploitability_s"] = time.perf_counter() - start
        return {f"{prefix}/{key}": value for key, value in values.items()}

    def _tested(self, pl_module: Any) -> Any:
        """The policy as a player: the network alone, or its tree search (``search_simulations``) with the search
        settings the module trained with (``NetworkMCTS.of_module``: AlphaZero's ``c_puct``)."""
        if self.search_simulations:
            return NetworkMCTS.of_module(pl_module, self.search_simulations)
        return PolicyBot(pl_module, self.deterministic, self.seed)

    def _panel(self, trainer: pl.Trainer, env: TorchEnv, pl_module: Any) -> list[panels.Player]:
        """The opponents now (the league's snapshots change between evaluations)."""
        selfplay = getattr(getattr(trainer, "datamodule", None), "selfplay", None)
        league = getattr(selfplay, "league", None)
        return panels.resolve_panel(self.opponents, env, league, self.deterministic, pl_module.device)

    @override
    def state_dict(self) -> dict[str, Any]:
        last_updates, cadence = self.last_updates, self.cadence.state_dict()
        if self._before_pending is not None:  # still playing: a resumed run plays it again at its first update
            last_updates, counter = self._before_pending
            cadence["last_seen"] = counter // self.cadence.every * self.cadence.every - 1
        return {"last_updates": last_updates, "cadence": cadence,
                "deterministic": self._resolved_deterministic}  # read by ``load_policy``  # fmt: skip

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_updates = state_dict["last_updates"]
        self.cadence.load_state_dict(state_dict["cadence"])


@contextlib.contextmanager
def game_evaluation_for(trainer: pl.Trainer) -> Iterator[GameEvaluation]:
    """The run's ``GameEvaluation`` (its settings), or, for a config without one, a default that plays ``random``
    and the game's bundled heuristic (where it has one), 100 deals per seat; ``validate``/``test`` measure with it.
    """
    found = [callback for callback in trainer.callbacks if isinstance(callback, GameEvaluation)]
    if found:
        yield found[0]
        return
    env = trainer.datamodule.env
    seats = env.spec.num_seats
    default = GameEvaluation(every_n_updates=1, opponents=panels.default_opponents(env), num_games=100 * seats)
    try:
        yield default
    finally:
        default.teardown(trainer, trainer.lightning_module, "test")
