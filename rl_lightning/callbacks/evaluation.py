"""``Evaluation``: periodic evaluation episodes on the env's evaluation form, keyed on updates or env steps; its
settings also drive ``rl-lightning validate``/``test`` (``evaluation_for``)."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from rl_lightning.algos.cuda_stream_weight_sync import wait_for_policy
from rl_lightning.callbacks.background_run import BackgroundRun, frozen_policy, plays_beside_training
from rl_lightning.callbacks.cadence import Cadence
from rl_lightning.callbacks.evaluation_settings import check_evaluation_settings
from rl_lightning.envs.base import TorchEnv
from rl_lightning.errors import ConfigError
from rl_lightning.evaluation.episodes import DEFAULT_MAX_STEPS, Episodes, episode_metrics, play_episodes
from rl_lightning.evaluation.fused import CompiledEpisodes, require_compiled_evaluation
from rl_lightning.evaluation.video import (
    FrameRecorder,
    check_renders,
    tensorboard_loggers,
    write_video,
)
from rl_lightning.reporting.env_step_log import log_at_env_step, publish_to_callbacks, to_floats


class Evaluation(Callback):
    """Runs ``num_episodes`` evaluation episodes every ``every_n_updates`` updates or ``every_n_env_steps`` env steps.

    Fires in ``on_train_batch_end`` (after the update, before checkpointing) once each time the counter crosses
    a multiple (never on a cycle that made no update), and at the end of training unless the last update was
    just evaluated. Logs ``eval/episode_return``, ``eval/episode_length``, ``eval/episodes_cut``,
    ``eval/random_episode_return`` (a uniform-random policy on the same env, sampled from its action space,
    measured once; it plays the agent's side, so in an env with a built-in opponent such as ``TicTacToe`` the same
    seat as the agent: X, moving first) and ``eval/margin_over_random`` as one point per evaluation at its env step;
    the values are over all ranks' episodes and also feed ``RLCheckpoint(monitor="eval/episode_return")`` and
    ``rl_lightning.callbacks.EarlyStopping``.

    Cut episodes: an episode still running after ``max_steps`` steps is cut. It is counted in
    ``eval/episodes_cut`` and left out of both means, which are over the episodes that ended (terminated, or
    truncated by the env's own time limit); if every episode was cut the means are NaN and a warning says so.

    The eval env is the training env's evaluation form, built once, at the first evaluation, from the datamodule's
    env constructor arguments (``TorchEnv.fresh``: the training env, live Gymnasium envs included, is never copied;
    for an Atari preset whole games with raw scores), reused by every evaluation and closed when the fit ends.
    Before acting it waits on the module's ``policy_ready_event``, if any (``CUDAStreamWeightSync``: the acting
    copy of the weights may still be being written on a side stream). The module is put in eval mode for the
    episodes and back in its former mode afterwards, also when an episode raises.

    ``rl-lightning validate``/``test`` play once with the same env form and settings (``num_episodes``, ``seed``,
    ``deterministic``, ``max_steps``; always eagerly, without video or random baseline), logged as ``eval/*`` or
    ``test/*``; ``data.eval_episodes``/``data.eval_seed``, when set, override ``num_episodes``/``seed`` there. A
    config without an ``Evaluation`` callback gets these defaults. The resolved ``deterministic`` is saved in the
    checkpoint, where ``load_policy`` reads it so it acts as the run's evaluation did.

    With ``record_video > 0`` the first ``record_video`` policy episodes of each evaluation are drawn by the
    env's ``render_rgb`` (Gymnasium envs: the eval env is made with ``render_mode="rgb_array"``) and written,
    on rank zero, as one ``eval/video`` summary at the evaluation's env step (TensorBoard's IMAGES tab, one
    animated GIF with the episodes side by side). It needs ``pip install -e ".[video]"``.

    With ``background``, each evaluation plays beside training (``rl_lightning.callbacks.background_run``): when one
    falls due, the callback takes a frozen copy of the acting policy (every weight and buffer, observation
    normalisers' statistics included) and a thread of the learner plays the episodes on the eval env with it, one
    env step at a time, only while the learner waits for its actors' rollouts, so it takes the learner's idle time
    and not the actor's. The episodes are exactly the foreground's for the same weights (same env, seed and
    settings). Its record is logged at the env step (and update) the copy was taken at, once its episodes end: it is
    checked at each later update, and ``rl_lightning.callbacks.EarlyStopping`` and ``RLCheckpoint(monitor=...)`` read
    the value then, so a monitored value arrives late by up to one evaluation. The checkpoint that ranks on it holds
    the weights of the update the value arrived at, not the ones that scored it; keep ``background: false`` where
    the best checkpoint must hold exactly the scored weights. One evaluation is in flight at a time: when the next
    falls due while one still plays, the learner waits for it first (no queue). The end of training waits for it
    too, before the last checkpoint, then evaluates the last update in the foreground unless it was the one just
    taken. A stop request (SIGTERM, Ctrl+C) ends it within one env step, and what it raised is raised in the
    learner's thread; one still playing when a checkpoint is saved (a stop's included) is played again, with the
    then current weights, after a resume. It needs actors (``data.num_actors >= 1``) and one device; otherwise
    evaluations play in the foreground, with a notice: a serial learner never waits, so the episodes would advance
    only when waited on (the foreground's cost, later), and a thread not gated on the learner's waits would contend
    with every update for the GIL (``rl_lightning.processes.learner_waits``).

    Args:
        every_n_updates: evaluate after every this many learner updates.
        every_n_env_steps: evaluate each time the env-step counter crosses a multiple of this.
        num_episodes: episodes per evaluation (one per env row, run in parallel).
        deterministic: act with the policy's mode (``False``: sample, as in training); ``None`` takes the
            algorithm's evaluation default (PPO: the mode; SPO: a draw from the search target, as published).
        env: the env core to evaluate on, played as given (pass ``train_env.fresh()`` for its evaluation form);
            ``None`` builds the datamodule env's evaluation form (``fresh()``: same constructor arguments).
        seed: seed of the evaluation env; every evaluation replays the same start states.
        max_steps: steps after which an episode is cut (counted in ``eval/episodes_cut``, left out of the means).
            The default 27,000 is an Atari game's 108,000 frames at frame skip 4, so whole games are never cut.
        record_video: episodes recorded per evaluation (at most ``num_episodes``); 0 renders nothing.
        video_fps: frames per second of the recorded videos.
        compile: play with the compiled evaluation step (``CompiledEpisodes``: deterministic act and env step in
            one ``torch.compile``d graph), compiled at the first evaluation. Needs what ``data.compile`` needs (a
            torch-native env that steps from noise, PPO with Discrete or Box actions), deterministic evaluation and
            no ``record_video``. It pays only over many evaluations: compiling takes seconds, an evaluation of a few
            hundred steps a fraction of one.
        background: play each evaluation on a frozen copy of the policy in the learner's waits for its actors
            (see above); not with ``record_video`` or ``compile``. ``validate``/``test`` always play in the
            foreground.
    """

    def __init__(
        self,
        every_n_updates: int | None = None,
        every_n_env_steps: int | None = None,
        num_episodes: int = 10,
        deterministic: bool | None = None,
        env: TorchEnv | None = None,
        seed: int = 12_345,
        max_steps: int = DEFAULT_MAX_STEPS,
        record_video: int = 0,
        video_fps: int = 30,
        compile: bool = False,
        background: bool = False,
    ) -> None:
        self.cadence = Cadence("Evaluation", every_n_updates, every_n_env_steps)
        check_evaluation_settings(num_episodes, max_steps, record_video, video_fps, compile, background)
        self.background = background
        self._in_background = False  # resolved at setup: ``background`` where the learner waits for actors
        self._pending: BackgroundRun | None = None
        self._copy: Any = None  # the frozen policy background evaluations play (its weights reloaded each time)
        self._before_pending: tuple[int, int] | None = None  # (last taken update, cadence counter) before it
        self.compile = compile
        self._compiled: CompiledEpisodes | None = None
        self.record_video = record_video
        self.video_fps = video_fps
        self.every_n_updates = every_n_updates
        self.every_n_env_steps = every_n_env_steps
        self.num_episodes = num_episodes
        self.deterministic = deterministic
        self.env = env
        self.seed = seed
        self.max_steps = max_steps
        self.random_return: float | None = None
        self.last_updates = -1  # the update whose end saw the latest record reach the monitors (EarlyStopping)
        self._last_taken = -1  # the update the latest background evaluation measured (or the foreground's)
        self.eval_seconds = 0.0  # wall time spent evaluating (benchmarks subtract it from training time)
        self.history: list[dict[str, float]] = []
        self._built_env: TorchEnv | None = None  # the env built from the datamodule's, once per fit
        self._resolved_deterministic: bool | None = None  # ``deterministic`` as played (saved for ``load_policy``)

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(
            every_n_updates=self.every_n_updates,
            every_n_env_steps=self.every_n_env_steps,
            num_episodes=self.num_episodes,
            deterministic=self.deterministic,
        )

    def should_evaluate(self, pl_module: Any) -> bool:
        """Cadence predicate: overridable, evaluated identically on every rank (counters are global)."""
        return self.cadence.due(pl_module)

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.sanity_checking:
            return
        if self._pending is not None and self._pending.done():
            self._log_pending(trainer, pl_module)
        if not self.should_evaluate(pl_module):
            return
        if self._in_background:
            self._start_background(trainer, pl_module)
        else:
            self.evaluate(trainer, pl_module)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        if self._pending is not None:  # before the last checkpoint, which may monitor its value
            self._log_pending(trainer, pl_module)
        if pl_module.updates > 0 and self._evaluated_updates() != pl_module.updates:
            self.evaluate(trainer, pl_module, on_step=False)

    def check_datamodule(self, datamodule: Any) -> None:
        """Refuse, in one line, an env these single-agent episodes cannot play (a multi-seat game). The CLI calls
        this before the trainer starts; ``setup`` again, for runs built in Python."""
        env = self.env if self.env is not None else getattr(datamodule, "env", None)
        seats = getattr(getattr(env, "spec", None), "num_seats", 1)
        if seats > 1:
            raise ConfigError(
                f"trainer.callbacks: Evaluation plays single-agent episodes, but {env.spec.name!r} has {seats} seats; "
                "evaluate a game with rl_lightning.callbacks.GameEvaluation instead (e.g. --config "
                "callbacks/game_eval.yaml, or init_args: {opponents: [random]})"
            )

    @override
    def setup(self, trainer: pl.Trainer, pl_module: Any, stage: str) -> None:
        self.check_datamodule(trainer.datamodule)
        self._resolved_deterministic = self._deterministic(pl_module)
        self._in_background = (
            self.background
            and stage == "fit"
            and plays_beside_training("Evaluation", getattr(trainer, "datamodule", None), trainer.world_size)
        )
        if self.compile:
            require_compiled_evaluation(pl_module, self.env or trainer.datamodule.env, self._deterministic(pl_module))
        if self.record_video and trainer.is_global_zero:  # only rank zero records: fail there before training
            field = f"Evaluation: record_video={self.record_video}"
            tensorboard_loggers(trainer, field)
            check_renders(self.eval_env(trainer), field)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: Any, stage: str) -> None:
        if self._pending is not None:  # the run ended (or failed) without waiting for it
            self._pending.abandon()
            self._pending = None
        self._copy = None
        if self._built_env is not None:  # an ``env`` given by the user stays the user's to close
            self._built_env.close()
            self._built_env = None
        self._compiled = None

    def eval_env(self, trainer: pl.Trainer) -> TorchEnv:
        """The env core evaluations play on: ``env``, or one built once like the datamodule's."""
        if self.env is not None:
            return self.env
        if self._built_env is None:
            self._built_env = trainer.datamodule.env.fresh(render=self.record_video > 0)
        return self._built_env

    def evaluate(self, trainer: pl.Trainer, pl_module: Any, on_step: bool = True) -> dict[str, float]:
        """Play the episodes, log ``eval/*`` once at the current env step, and return the record."""
        start = time.perf_counter()
        metrics = self._metrics(trainer, pl_module, self.random_return)
        record = to_floats(metrics)
        self.random_return = record["eval/random_episode_return"]
        if not trainer.sanity_checking and trainer.state.fn == "fit" and trainer.training:
            # Already over all ranks' episodes (summed above), so identical on every rank: sync_dist says so to
            # Lightning (its epoch-level check warns otherwise) and averaging equal values changes nothing.
            pl_module.log_dict(
                metrics, on_step=on_step, on_epoch=not on_step, batch_size=1, logger=False, sync_dist=True
            )
            log_at_env_step(trainer, record, pl_module.env_steps)
        self.last_updates = self._last_taken = pl_module.updates
        self.eval_seconds += time.perf_counter() - start
        record.update(env_steps=pl_module.env_steps, updates=pl_module.updates)
        self.history.append(record)
        return record

    def _metrics(self, trainer: pl.Trainer, pl_module: Any, random_return: float | None) -> dict[str, torch.Tensor]:
        """One evaluation's ``eval/*`` of ``pl_module`` (the live module, or a background run's frozen copy), the
        random baseline played first while ``random_return`` is not known yet."""
        if random_return is None:
            env, seed = self.eval_env(trainer), self.seed + 1_000 * trainer.global_rank
            played = play_episodes("random", env, self.num_episodes, pl_module.device, seed, True, self.max_steps)
            random_return = float(episode_metrics(played, _sum_over_ranks(trainer))["episode_return"])
        metrics = self.measure(trainer, pl_module, "eval")
        metrics["eval/random_episode_return"] = torch.tensor(random_return, device=pl_module.device)
        metrics["eval/margin_over_random"] = metrics["eval/episode_return"] - random_return
        return metrics

    def _start_background(self, trainer: pl.Trainer, pl_module: Any) -> None:
        """Take a frozen copy of the policy now and play its episodes in the learner's waits (``background``),
        after waiting for the previous one if it still plays."""
        if self._pending is not None:
            self._log_pending(trainer, pl_module)
        start = time.perf_counter()
        wait_for_policy(pl_module)  # the acting weights are whole before they are copied
        copy = self._copy = frozen_policy(pl_module, self._copy)
        self.eval_env(trainer)  # built here, in the learner's thread, at the first evaluation
        counter = pl_module.env_steps if self.cadence.counter == "env_steps" else pl_module.updates
        self._before_pending = (self._last_taken, counter)
        random_return = self.random_return

        def play() -> dict[str, float]:
            return to_floats(self._metrics(trainer, copy, random_return))

        self._pending = BackgroundRun(play, pl_module.env_steps, pl_module.updates)
        self._last_taken = pl_module.updates
        self.eval_seconds += time.perf_counter() - start

    def _log_pending(self, trainer: pl.Trainer, pl_module: Any) -> None:
        """Wait for the background evaluation (if it still plays) and log its record at the env step it was taken
        at; it reaches the monitors now, at the end of this update."""
        pending, self._pending = self._pending, None
        assert pending is not None
        start = time.perf_counter()
        try:
            record = pending.wait()
        finally:
            self.eval_seconds += time.perf_counter() - start  # the learner's time it took, not the thread's
        self._before_pending = None  # not before: a stop request (or error) it raised leaves it for a resume to replay
        self.random_return = record["eval/random_episode_return"]
        publish_to_callbacks(trainer, record)
        log_at_env_step(trainer, record, pending.env_steps)
        self.last_updates = pl_module.updates  # EarlyStopping checks after this update: the value just arrived
        self.history.append({**record, "env_steps": pending.env_steps, "updates": pending.updates})

    def measure(
        self,
        trainer: pl.Trainer,
        pl_module: Any,
        prefix: str = "eval",
        num_episodes: int | None = None,
        seed: int | None = None,
    ) -> dict[str, torch.Tensor]:
        """Play the policy's episodes once; ``{prefix}/episode_return``, ``/episode_length``, ``/episodes_cut``.

        The means are over the episodes that ended on all ranks (see the class docstring for cut episodes).
        ``num_episodes`` and ``seed`` override this callback's for one call (``validate``/``test``).
        """
        num_episodes = self.num_episodes if num_episodes is None else num_episodes
        if num_episodes < 1:
            raise ConfigError(f"data.eval_episodes={num_episodes} must be >= 1 (or unset: the Evaluation's)")
        seed = (self.seed if seed is None else seed) + 1_000 * trainer.global_rank
        played = self._play(trainer, pl_module, self.eval_env(trainer), seed, num_episodes)
        return {f"{prefix}/{key}": value for key, value in episode_metrics(played, _sum_over_ranks(trainer)).items()}

    def _play(self, trainer: pl.Trainer, pl_module: Any, env: TorchEnv, seed: int, num_episodes: int) -> Episodes:
        """The policy's episodes (recorded to TensorBoard on rank zero when ``record_video`` in a fit)."""
        wait_for_policy(pl_module)
        fitting = trainer.state.fn == "fit"
        recording = self.record_video > 0 and trainer.is_global_zero and fitting
        recorder = FrameRecorder(env, self.record_video) if recording else None
        was_training = pl_module.training
        pl_module.eval()
        try:
            if self.compile and fitting:
                if self._compiled is None:  # compiled once per fit, at the first evaluation
                    self._compiled = CompiledEpisodes(pl_module, env, self.num_episodes, pl_module.device)
                played = self._compiled.run(seed, self.max_steps)
            else:
                deterministic = self._deterministic(pl_module)
                played = play_episodes(
                    pl_module, env, num_episodes, pl_module.device, seed, deterministic, self.max_steps, recorder
                )
        finally:
            pl_module.train(was_training)
        if recorder is not None:
            loggers = tensorboard_loggers(trainer, f"Evaluation: record_video={self.record_video}")
            write_video(loggers, "eval/video", recorder.video(played.lengths), pl_module.env_steps, self.video_fps)
        return played

    def _evaluated_updates(self) -> int:
        """The update the latest evaluation measured: in the foreground the one it reached the monitors at
        (``last_updates``, which subclasses that play their own ``evaluate`` set), in the background the one its copy
        was taken at."""
        return self._last_taken if self._in_background else self.last_updates

    def _deterministic(self, pl_module: Any) -> bool:
        return pl_module.eval_deterministic if self.deterministic is None else self.deterministic

    @override
    def state_dict(self) -> dict[str, Any]:
        last_updates, cadence = self._evaluated_updates(), self.cadence.state_dict()
        if self._before_pending is not None:  # still playing: a resumed run plays it again at its first update
            last_updates, counter = self._before_pending
            cadence["last_seen"] = counter // self.cadence.every * self.cadence.every - 1
        return {
            "random_return": self.random_return,
            "last_updates": last_updates,
            "cadence": cadence,
            "deterministic": self._resolved_deterministic,  # read by ``load_policy``; the config wins on resume
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.random_return = state_dict["random_return"]
        self.last_updates = self._last_taken = state_dict["last_updates"]
        if "cadence" in state_dict:
            self.cadence.load_state_dict(state_dict["cadence"])


def _sum_over_ranks(trainer: pl.Trainer) -> Any:
    return functools.partial(trainer.strategy.reduce, reduce_op="sum")


@contextlib.contextmanager
def evaluation_for(trainer: pl.Trainer) -> Iterator[Evaluation]:
    """The run's ``Evaluation`` callback (its settings), or one with the defaults when the config has none.

    ``validate``/``test`` play with it. A default one exists for this call only: its eval env is closed on exit
    (the run's callback closes its own at teardown).
    """
    found = [callback for callback in trainer.callbacks if isinstance(callback, Evaluation)]
    if found:
        yield found[0]
        return
    default = Evaluation(every_n_updates=1)
    default._resolved_deterministic = default._deterministic(trainer.lightning_module)
    try:
        yield default
    finally:
        default.teardown(trainer, trainer.lightning_module, "validate")
