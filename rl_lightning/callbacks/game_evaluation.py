"""``GameEvaluation``: a game agent against a panel of opponents, seats rotated, duplicate deals, intervals, tests
and a rating table, keyed on updates or env steps; ``rl-lightning test`` plays the same panel from a checkpoint."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from rl_lightning.callbacks.cadence import Cadence
from rl_lightning.env_step_log import log_at_env_step, publish_to_callbacks
from rl_lightning.envs.base import TorchEnv
from rl_lightning.errors import ConfigError
from rl_lightning.games import panel as panels
from rl_lightning.games.match import PolicyBot, check_engine_players
from rl_lightning.games.search import NetworkMCTS
from rl_lightning.games.summary import match_metrics


class GameEvaluation(Callback):
    """Plays the policy against each opponent of ``opponents`` every ``every_n_updates`` / ``every_n_env_steps``.

    Fires in ``on_train_batch_end`` (after the update) each time the counter crosses a multiple, and at the end of
    training unless the last update was just evaluated. ``rl-lightning validate``/``test`` on a multi-seat game play
    the same panel once through ``measure`` (``RLModule``'s test step calls it via ``game_evaluation_for``),
    logged under ``eval/``/``test/``.

    Each match seats the policy in every seat in turn (``num_games / num_seats`` deals per seat) against the
    opponent in all other seats; with ``duplicate`` every rotation and the baseline replay the same deals
    (``rl_lightning.games.match``). Logged per opponent, one point per evaluation at its env step
    (``rl_lightning.games.summary`` defines each): ``eval/vs_<name>/points_per_hand`` (Hearts; other games
    ``<score>_per_game``) with ``_low``/``_high`` (95% interval), ``baseline_points_per_hand`` (the opponent in
    the policy's seats), ``p_value`` (paired over deals when duplicate, else Welch), ``games``; two-seat games add
    ``win_rate``/``draw_rate``/``loss_rate`` with intervals, ``baseline_win_rate`` and ``p_value_win_rate``.
    With ``rating_games > 0`` a round robin of the policy and the whole panel gives ``eval/rating/<name>`` (Elo,
    ``random`` = 0 when it plays; ``rl_lightning.games.rating``). The values also go to
    ``trainer.callback_metrics`` (``RLCheckpoint``/``EarlyStopping`` monitors). Every rank plays the same panels.

    Args:
        every_n_updates: evaluate after every this many learner updates.
        every_n_env_steps: evaluate each time the env-step counter crosses a multiple of this.
        opponents: the panel: ``random``, ``heuristic`` (the game's bundled bot), ``league`` (each snapshot of the
            run's league), checkpoint files (``*.ckpt``) or bot class paths (``pkg.module:Class``).
        num_games: the policy's games against each opponent; a multiple of the game's seats.
        duplicate: replay each deal with the seats rotated (and for the baseline): paired tests, less variance.
        rating_games: games per pair in the rating round robin (matches already played are reused); 0: no
            table; ``None``: ``num_games``.
        deterministic: act with the mode (``None``: the algorithm's evaluation default); also for league and
            checkpoint opponents.
        env: the game to play; ``None`` builds one like the datamodule's (same constructor arguments).
        seed: every evaluation replays the same deals from this seed.
        batch_size: games played at once.
        search_simulations: above 0, the policy plays through ``NetworkMCTS`` (``rl_lightning.games.search``):
            a tree search of this many simulations per move with the network's policy as prior and its value head
            at the leaves, so the panel shows what the searching agent plays (perfect-information OpenSpiel games
            only); 0 plays the network alone.
    """

    def __init__(
        self,
        every_n_updates: int | None = None,
        every_n_env_steps: int | None = None,
        opponents: list[str] | None = None,
        num_games: int = 400,
        duplicate: bool = True,
        rating_games: int | None = None,
        deterministic: bool | None = None,
        env: TorchEnv | None = None,
        seed: int = 12_345,
        batch_size: int = 256,
        search_simulations: int = 0,
    ) -> None:
        self.cadence = Cadence("GameEvaluation", every_n_updates, every_n_env_steps)
        self.opponents = panels.check_opponents(["random", "heuristic"] if opponents is None else opponents,
                                         "GameEvaluation")  # fmt: skip
        for name, value, least in (("num_games", num_games, 1), ("batch_size", batch_size, 1),
                                   ("rating_games", rating_games or 0, 0),
                                   ("search_simulations", search_simulations, 0)):  # fmt: skip
            if value < least:
                raise ConfigError(f"GameEvaluation: {name}={value} must be >= {least}")
        self.every_n_updates, self.every_n_env_steps = every_n_updates, every_n_env_steps
        self.num_games, self.duplicate, self.rating_games = num_games, duplicate, rating_games
        self.deterministic, self.env, self.seed, self.batch_size = deterministic, env, seed, batch_size
        self.search_simulations = search_simulations
        self.last_updates = -1
        self.eval_seconds = 0.0
        self.history: list[dict[str, float]] = []
        self._built_env: TorchEnv | None = None

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(opponents=self.opponents, num_games=self.num_games)

    def should_evaluate(self, pl_module: Any) -> bool:
        """Cadence predicate: overridable, identical on every rank (counters are global)."""
        return self.cadence.due(pl_module)

    @override
    def setup(self, trainer: pl.Trainer, pl_module: Any, stage: str) -> None:
        env = self.game_env(trainer)
        seats = env.spec.num_seats
        self._panel(trainer, env, pl_module)  # an opponent that cannot play fails now, before any training
        check_engine_players(env, [self._tested(pl_module)], "GameEvaluation.search_simulations")
        for name, games in (("num_games", self.num_games), ("rating_games", self.rating_games or 0)):
            if games % seats:
                fit = (games // seats + 1) * seats
                raise ConfigError(f"GameEvaluation: {name}={games} is not a multiple of the game's {seats} seats, "
                                  f"so the policy could not sit in each seat equally; use {fit}")  # fmt: skip

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: Any, stage: str) -> None:
        if self._built_env is not None:
            self._built_env.close()
            self._built_env = None

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not trainer.sanity_checking and self.should_evaluate(pl_module):
            self.evaluate(trainer, pl_module)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        if pl_module.updates > 0 and self.last_updates != pl_module.updates:
            self.evaluate(trainer, pl_module)

    def game_env(self, trainer: pl.Trainer) -> TorchEnv:
        """The game played: ``env``, or one built once like the datamodule's."""
        if self.env is not None:
            return self.env
        if self._built_env is None:
            self._built_env = trainer.datamodule.env.fresh()
        return self._built_env

    def evaluate(self, trainer: pl.Trainer, pl_module: Any) -> dict[str, float]:
        """Play the panel, log ``eval/*`` once at the current env step, and return the record."""
        start = time.perf_counter()
        record = self.measure(trainer, pl_module, "eval")
        publish_to_callbacks(trainer, record)
        log_at_env_step(trainer, record, pl_module.env_steps)
        self.last_updates = pl_module.updates
        self.eval_seconds += time.perf_counter() - start
        self.history.append({**record, "env_steps": float(pl_module.env_steps), "updates": float(pl_module.updates)})
        return record

    def measure(self, trainer: pl.Trainer, pl_module: Any, prefix: str = "eval") -> dict[str, float]:
        """Play the panel (and the rating round robin) once; ``{prefix}/vs_<name>/*`` and ``{prefix}/rating/*``."""
        env = self.game_env(trainer)
        panel = self._panel(trainer, env, pl_module)
        policy = panels.Player(panels.POLICY, self._tested(pl_module))
        deals = self.num_games // env.spec.num_seats
        was_training = pl_module.training
        pl_module.eval()
        try:
            results = panels.play_panel(env, policy, panel, deals, self.seed, self.duplicate, self.batch_size)
            ratings = {}
            rating_games = self.num_games if self.rating_games is None else self.rating_games
            if rating_games:
                played = {(panels.POLICY, name): result for name, result in results.items()}
                ratings = panels.rating_table(env, [policy, *panel], played, rating_games // env.spec.num_seats,
                                       self.seed, self.duplicate, self.batch_size)  # fmt: skip
        finally:
            pl_module.train(was_training)
        metrics = {f"{prefix}/vs_{name}/{key}": value for name, result in results.items()
                   for key, value in match_metrics(result).items()}  # fmt: skip
        metrics.update({f"{prefix}/rating/{name}": value for name, value in ratings.items()})
        return metrics

    def _tested(self, pl_module: Any) -> Any:
        """The policy as a player: the network alone, or its tree search (``search_simulations``)."""
        if self.search_simulations:
            return NetworkMCTS(pl_module, self.search_simulations)
        return PolicyBot(pl_module, self.deterministic, self.seed)

    def _panel(self, trainer: pl.Trainer, env: TorchEnv, pl_module: Any) -> list[panels.Player]:
        """The opponents now (the league's snapshots change between evaluations)."""
        selfplay = getattr(getattr(trainer, "datamodule", None), "selfplay", None)
        league = getattr(selfplay, "league", None)
        return panels.resolve_panel(self.opponents, env, league, self.deterministic, pl_module.device)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"last_updates": self.last_updates, "cadence": self.cadence.state_dict()}

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
