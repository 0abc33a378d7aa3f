"""``rl-lightning tune``: an Optuna study over any config keys, each trial a normal ``fit`` of the same config.

    rl-lightning tune --config ppo.yaml --search search.yaml --n_trials 20 [--seeds_per_trial 2]
        [--storage URL] [--study_name NAME] [--n_jobs 2] [--pruner median|halving|none]
        [--objective last_k|auc] [--last_k 3] [--dir DIR] [any --key value of fit, applied to every trial]

Everything is checked before any trial runs or any file is written: the fit arguments (as ``fit`` parses them),
every search key against the resolved config, and every range end and choice through the config's type hints.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_lightning.errors import ConfigError
from rl_lightning.processes import stop
from rl_lightning.tune import config as cfg
from rl_lightning.tune import study as st
from rl_lightning.tune.config import to_yaml, with_params
from rl_lightning.tune.space import load_search


@dataclass(frozen=True)
class Settings:
    """What every trial shares: seeds per trial, objective, and the seed they count up from."""

    seeds_per_trial: int
    objective: str
    last_k: int
    base_seed: int


class _Parser(argparse.ArgumentParser):
    """Its errors are one ``ConfigError`` line instead of the usage text."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise ConfigError(f"tune: {message} (see: rl-lightning tune --help)")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rl-lightning tune", allow_abbrev=False, description=__doc__.split("\n")[0])
    p.add_argument("--search", required=True, help="YAML map of dotted config keys to distributions")
    p.add_argument("--n_trials", type=int, required=True, help="finished trials the study should hold (all workers)")
    p.add_argument("--seeds_per_trial", type=int, default=1, help="fits per trial, seeds counting up, run side by side")
    p.add_argument("--storage", default=None, help="Optuna storage URL (default: sqlite file DIR/study.db)")
    p.add_argument("--study_name", default=None, help="default: the first --config's file name")
    p.add_argument("--dir", default=None, help="study directory (default: runs/tune/STUDY_NAME)")
    p.add_argument("--n_jobs", type=int, default=1, help="trials run in parallel by this process")
    p.add_argument("--pruner", choices=("median", "halving", "none"), default="median")
    p.add_argument("--pruner_startup_trials", type=int, default=3, help="median: trials before any pruning")
    p.add_argument(
        "--pruner_warmup_steps",
        type=int,
        default=0,
        help="median: steps before a trial is pruned (env steps, or updates with an every_n_updates "
        "Evaluation; evaluations report at their counter rounded down to its cadence)",
    )
    p.add_argument("--objective", choices=("last_k", "auc"), default="last_k")
    p.add_argument("--last_k", type=int, default=3, help="last_k: evaluations averaged")
    p.add_argument(
        "--sampler_seed",
        type=int,
        default=None,
        help="TPE sampler seed (give each worker its own); "
        "mixed with the study's trial count, so a restarted worker draws new parameters",
    )
    p.add_argument("--heartbeat", type=int, default=10, help="seconds; a trial silent 3x this long is retried")
    return p


def split_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Tune options, and everything else (``--config``s and overrides, in order) for ``fit``."""
    options, fit_args = parser().parse_known_args(list(argv))
    checks = [
        ("n_trials", options.n_trials >= 1),
        ("seeds_per_trial", options.seeds_per_trial >= 1),
        ("n_jobs", options.n_jobs >= 1),
        ("last_k", options.last_k >= 1),
        ("heartbeat", options.heartbeat >= 1),
    ]
    for name, ok in checks:
        if not ok:
            raise ConfigError(f"--{name}={getattr(options, name)} must be >= 1")
    if not any(a == "--config" or a.startswith("--config=") for a in fit_args):
        raise ConfigError("tune needs --config (the fit config every trial runs, e.g. --config ppo.yaml)")
    return options, fit_args


def study_name(options: argparse.Namespace, fit_args: list[str]) -> str:
    if options.study_name:
        return options.study_name
    for index, arg in enumerate(fit_args):
        value = (
            arg.split("=", 1)[1]
            if arg.startswith("--config=")
            else (fit_args[index + 1] if arg == "--config" and index + 1 < len(fit_args) else None)
        )
        if value is not None:
            return Path(value).stem
    return "study"


def main(argv: Sequence[str]) -> None:
    """Check everything, then run the study's trials and write the best config and the table."""
    options, fit_args = split_args(argv)
    _require_optuna()
    config = cfg.resolve_fit_config(fit_args)
    if not cfg.has_evaluation(config):
        raise ConfigError(
            "tune: the config has no rl_lightning.callbacks.Evaluation in trainer.callbacks, so there is no "
            "eval/episode_return to tune on; add one (e.g. --config callbacks/eval.yaml)"
        )
    params = load_search(options.search, config)
    cfg.check_candidates(config, params, f"--search {options.search}")
    name = study_name(options, fit_args)
    study_dir = Path(options.dir or Path("runs") / "tune" / name).resolve()
    study_dir.mkdir(parents=True, exist_ok=True)
    storage = options.storage or f"sqlite:///{study_dir / 'study.db'}"
    lock = study_dir / ".claim.lock" if storage.startswith("sqlite") else None
    pruner = st.make_pruner(options.pruner, options.pruner_startup_trials, options.pruner_warmup_steps)
    with st.claim_lock(lock):  # workers starting together on a new SQLite file would both create its tables
        study = st.open_study(storage, name, pruner, options.sampler_seed, options.heartbeat)
    settings = Settings(options.seeds_per_trial, options.objective, options.last_k, cfg.base_seed(config))
    distributions = {p.key: p.distribution() for p in params}
    runner = st.trial_runner(study_dir, config, settings)
    print(f"rl-lightning tune: study {name!r} at {storage} (pid {os.getpid()}); runs under {study_dir}", flush=True)
    with stop.signals_request_stop():  # SIGTERM / Ctrl+C: end the fits, put their trials back, exit 128 + signum
        st.run_workers(options.n_jobs, lambda: st.worker(study, options.n_trials, distributions, runner, lock))
    print(st.table(study, [p.key for p in params]), flush=True)
    _write_best(study, config, study_dir)


def _write_best(study: Any, config: dict[str, Any], study_dir: Path) -> None:
    completed = [t for t in study.get_trials(deepcopy=False) if t.value is not None and t.state.name == "COMPLETE"]
    if not completed:
        print("rl-lightning tune: no trial completed, so no best config", file=sys.stderr, flush=True)
        return
    best = max(completed, key=lambda t: t.value)
    path = study_dir / "best.yaml"
    header = f"# rl-lightning tune: best of study {study.study_name!r}: trial {best.number}, value {best.value:.6g}\n"
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(header + to_yaml(with_params(config, best.params)))
    temporary.replace(path)
    print(f"best: trial {best.number}, value {best.value:.6g}; config: {path}", flush=True)


def _require_optuna() -> None:
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise ConfigError('tune needs Optuna: pip install -e ".[tune]"') from None
