"""The study: storage with heartbeats, a worker loop that runs trials until the study holds ``n_trials`` finished
ones (shared by every worker on the same storage), retries of trials whose worker died, the table."""

from __future__ import annotations

import contextlib
import fcntl
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rl_lightning.processes import stop
from rl_lightning.tune.trial import FitFailed, Pruned, run_trial

FAILED_FIT = "fit_failed"  # user attr of a trial that ran and failed (counted as done, not retried)


def open_study(storage_url: str, name: str, pruner: Any, sampler_seed: int | None, heartbeat_s: int) -> Any:
    """Create or load ``name`` on ``storage_url`` (maximising) with heartbeats, so a dead worker's trial goes stale,
    is failed and is retried once with the same parameters by whichever worker looks next.

    The TPE sampler's seed is ``sampler_seed`` mixed with the number of trials the study already holds
    (``worker_seed``): a worker restarted on a study it had begun draws new parameters, where the same seed would
    replay its first draws and run trials the study already has."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        kwargs: dict[str, Any] = {}
        if storage_url.startswith("sqlite"):
            kwargs["engine_kwargs"] = {"connect_args": {"timeout": 120}}  # several workers write one file
        storage = optuna.storages.RDBStorage(
            storage_url,
            heartbeat_interval=heartbeat_s,
            grace_period=3 * heartbeat_s,
            heartbeat_stale_trial_callback=_retry_callback(optuna)(max_retry=2),
            **kwargs,
        )
    study = optuna.create_study(
        storage=storage, study_name=name, direction="maximize", load_if_exists=True, pruner=pruner
    )
    study.sampler = optuna.samplers.TPESampler(seed=worker_seed(sampler_seed, len(study.get_trials(deepcopy=False))))
    return study


def worker_seed(sampler_seed: int | None, trials: int) -> int | None:
    """The sampler seed of a worker that opens a study holding ``trials`` trials (``None``: unseeded)."""
    if sampler_seed is None:
        return None
    return int(np.random.SeedSequence([sampler_seed, trials]).generate_state(1)[0])


def _retry_callback(optuna: Any) -> Any:
    """Optuna's callback that enqueues a stale trial's parameters again (renamed in Optuna 4.9)."""
    storages = optuna.storages
    return getattr(storages, "RetryHeartbeatStaleTrialCallback", None) or storages.RetryFailedTrialCallback


def make_pruner(kind: str, startup_trials: int, warmup_steps: int) -> Any:
    import optuna

    if kind == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=startup_trials, n_warmup_steps=warmup_steps)
    if kind == "halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


def counts(study: Any) -> dict[str, int]:
    """``done`` (complete, pruned, or a fit that failed), ``running`` and ``waiting`` trials of the study."""
    from optuna.trial import TrialState

    result = {"done": 0, "running": 0, "waiting": 0}
    for trial in study.get_trials(deepcopy=False):
        if trial.state in (TrialState.COMPLETE, TrialState.PRUNED) or (
            trial.state == TrialState.FAIL and FAILED_FIT in trial.user_attrs
        ):
            result["done"] += 1
        elif trial.state == TrialState.RUNNING:
            result["running"] += 1
        elif trial.state == TrialState.WAITING:
            result["waiting"] += 1
    return result


@contextlib.contextmanager
def claim_lock(lock_path: Path | None) -> Iterator[None]:
    """Serialise count-then-ask among workers on one machine (an SQLite study), so none overshoots ``n_trials``."""
    if lock_path is None:
        yield
        return
    with lock_path.open("a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def next_trial(study: Any, n_trials: int, distributions: dict[str, Any], lock_path: Path | None) -> Any | None:
    """Ask the next trial (a retry or an enqueued one first), or ``None`` once the study holds ``n_trials``.

    While other workers' trials would complete the count, wait: if one of them died, its trial goes stale after the
    grace period, is failed, and comes back as a waiting retry, which this worker then runs.
    """
    import optuna

    while True:
        stop.check()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        with claim_lock(lock_path):
            count = counts(study)
            if count["done"] >= n_trials:
                return None
            if count["done"] + count["running"] < n_trials:
                with warnings.catch_warnings():  # heartbeats are recorded by ``worker`` (ask/tell, not optimize)
                    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
                    trial = study.ask(distributions)
                study._storage.record_heartbeat(trial._trial_id)
                return trial
        time.sleep(1.0)


def worker(study: Any, n_trials: int, distributions: dict[str, Any], run: Any, lock_path: Path | None) -> None:
    """Run trials until the study is done; ``run(trial, heartbeat)`` returns the objective or raises."""
    import optuna

    storage = study._storage
    interval = storage.get_heartbeat_interval() or 10
    while (trial := next_trial(study, n_trials, distributions, lock_path)) is not None:
        last = [time.monotonic()]

        def heartbeat(trial_id: int = trial._trial_id, last: list[float] = last) -> None:
            if time.monotonic() - last[0] >= interval / 2:
                storage.record_heartbeat(trial_id)
                last[0] = time.monotonic()

        try:
            value = run(trial, heartbeat)
        except Pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        except FitFailed as err:
            trial.set_user_attr(FAILED_FIT, str(err))
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            print(f"rl-lightning tune: trial {trial.number} failed: {err}", flush=True)
        except BaseException:  # a stop request or a crash of this worker: the trial comes back as a retry
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
            raise
        else:
            if value != value:  # NaN: every evaluation episode was cut
                trial.set_user_attr(FAILED_FIT, "objective is NaN (no evaluation episode ended)")
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(trial, value)


def run_workers(n_jobs: int, target: Any) -> None:
    """``target()`` in ``n_jobs`` threads (each trial's fits are processes, so threads are enough); the first
    error of any thread is raised after all stop."""
    if n_jobs == 1:
        target()
        return
    errors: list[BaseException] = []

    def guarded() -> None:
        try:
            target()
        except BaseException as err:  # noqa: BLE001 - re-raised in the main thread
            errors.append(err)
            stop.request()  # the other threads end their trials too

    threads = [threading.Thread(target=guarded, name=f"tune-{i}") for i in range(n_jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(timeout=0.5)  # a timed join keeps the main thread responsive to signals
    if errors:
        raise errors[0]


def trial_runner(study_dir: Path, config: dict[str, Any], settings: Any) -> Any:
    return lambda trial, heartbeat: run_trial(trial, study_dir, config, settings, heartbeat)


def table(study: Any, keys: list[str]) -> str:
    """The study's trials as a fixed-width text table (number, state, value, env steps reached, params)."""
    header = ["trial", "state", "value", "last step", *keys]
    rows = [header]
    for trial in study.get_trials(deepcopy=False):
        value = "" if trial.value is None else f"{trial.value:.4g}"
        last_step = str(max(trial.intermediate_values)) if trial.intermediate_values else ""
        params = [_short(trial.params.get(key, "")) for key in keys]
        rows.append([str(trial.number), trial.state.name, value, last_step, *params])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
