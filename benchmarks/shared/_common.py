"""Shared pieces of the benchmarks (``ppo.py``, ``spo.py``): CLI-built runs, a target-stopping evaluation callback,
the per-run result record and the raw env-step rate.

Importing this module silences warnings and Lightning's INFO logging (the benchmarks print one table each).
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import logging
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]

warnings.filterwarnings("ignore")

import lightning.pytorch as pl  # noqa: E402

from rl_lightning.callbacks import Evaluation  # noqa: E402
from rl_lightning.cli import cli_main  # noqa: E402
from rl_lightning.envs import CartPole  # noqa: E402
from rl_lightning.envs.base import BatchedEnv  # noqa: E402
from rl_lightning.evaluation.episodes import run_episodes  # noqa: E402

for _name in ("lightning.pytorch", "lightning.fabric"):  # after import: lightning sets INFO on import
    logging.getLogger(_name).setLevel(logging.WARNING)

BENCH_TRAINER_ARGS = [
    "--trainer.logger",
    "false",
    "--trainer.enable_checkpointing",
    "false",
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
    "--trainer.callbacks",
    "[]",
]


class TargetEvaluation(Evaluation):
    """``Evaluation`` that scores ``metric`` and stops the run the first time the score reaches ``target``.

    ``metric``: ``"return"`` (mean episode return) or ``"win_or_draw"`` (fraction of episodes with return >= 0).
    ``target=None`` never stops the run (a fixed-budget learning curve). ``deterministic=None`` takes the
    module's evaluation default (``pl_module.eval_deterministic``; PPO: the mode, SPO: a draw from the search
    target), as the library's ``Evaluation`` does.

    ``history`` gets one record per evaluation (``env_steps``, ``updates``, ``eval/episode_return``, ``score``);
    ``eval_seconds`` accumulates the time spent here, so it can be subtracted from the fit wall time.
    """

    def __init__(self, metric: str, target: float | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.metric = metric
        self.target = target
        self.crossed: dict[str, float] | None = None
        self.fit_start: float | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self.fit_start = time.perf_counter()

    def evaluate(self, trainer: pl.Trainer, pl_module: Any, on_step: bool = True) -> dict[str, float]:
        start = time.perf_counter()
        env = self.env if self.env is not None else copy.deepcopy(trainer.datamodule.env)
        was_training = pl_module.training
        pl_module.eval()
        deterministic = pl_module.eval_deterministic if self.deterministic is None else self.deterministic
        returns, lengths = run_episodes(
            pl_module, env, self.num_episodes, pl_module.device, self.seed, deterministic, self.max_steps
        )
        pl_module.train(was_training)
        if self.env is None:
            env.close()
        mean_return = float(returns.mean())
        score = mean_return if self.metric == "return" else float((returns >= 0).float().mean())
        record = {
            "env_steps": float(pl_module.env_steps),
            "updates": float(pl_module.updates),
            "eval/episode_return": mean_return,
            "eval/episode_length": float(lengths.mean()),
            "score": score,
        }
        self.history.append(record)
        self.last_env_steps = pl_module.env_steps
        self.last_updates = pl_module.updates
        if self.crossed is None and self.target is not None and score >= self.target:
            trainer.should_stop = True
            self.eval_seconds += time.perf_counter() - start
            # Training time up to the crossing: wall time since on_train_start minus evaluation time so far.
            assert self.fit_start is not None
            record["train_seconds_at_cross"] = time.perf_counter() - self.fit_start - self.eval_seconds
            self.crossed = record
            return record
        self.eval_seconds += time.perf_counter() - start
        return record


@dataclass
class RunResult:
    seed: int
    crossed: bool
    env_steps: int | None  # at the crossing (None: never crossed within the budget, or no target)
    fit_seconds: float  # trainer.fit wall time (setup to teardown)
    eval_seconds: float
    train_seconds: float  # fit_seconds - eval_seconds
    final_score: float
    best_score: float
    total_env_steps: int  # env steps actually collected
    history: list[dict[str, float]] = field(default_factory=list)

    def score_at(self, env_steps: int) -> float | None:
        """Score of the first evaluation at or after ``env_steps`` (``None`` if the run ended before)."""
        for h in self.history:
            if h["env_steps"] >= env_steps:
                return h["score"]
        return None


@contextlib.contextmanager
def _clean_argv() -> Any:
    saved = sys.argv[1:]
    sys.argv[1:] = []  # LightningCLI warns when it sees both args= and command-line arguments
    try:
        yield
    finally:
        sys.argv[1:] = saved


_ROOT_DIR = tempfile.mkdtemp(prefix="rl_lightning_bench_")  # SaveConfigCallback writes config.yaml here, not cwd
atexit.register(shutil.rmtree, _ROOT_DIR, True)


def build_cli(config: str, seed: int, extra: list[str] | None = None) -> Any:
    """``rl_lightning.cli.cli_main(run=False)`` on ``configs/<config>`` with the benchmark trainer settings."""
    args = ["--config", str(REPO / "configs" / config), "--seed_everything", str(seed), *BENCH_TRAINER_ARGS]
    args += ["--trainer.default_root_dir", _ROOT_DIR]
    with _clean_argv():
        return cli_main([*args, *(extra or [])], run=False)


def fit_with(config: str, seed: int, callback: TargetEvaluation, extra: list[str] | None = None) -> RunResult:
    """One ``trainer.fit`` of ``configs/<config>`` (seeded) with ``callback`` as its only evaluation."""
    torch.set_num_threads(1)
    cli = build_cli(config, seed, extra)
    cli.trainer.callbacks.append(callback)
    start = time.perf_counter()
    cli.trainer.fit(cli.model, cli.datamodule)
    fit_seconds = time.perf_counter() - start
    scores = [h["score"] for h in callback.history] or [float("nan")]
    crossed = callback.crossed
    return RunResult(
        seed=seed,
        crossed=crossed is not None,
        env_steps=int(crossed["env_steps"]) if crossed else None,
        fit_seconds=fit_seconds,
        eval_seconds=callback.eval_seconds,
        train_seconds=fit_seconds - callback.eval_seconds,
        final_score=scores[-1],
        best_score=max(scores),
        total_env_steps=int(cli.datamodule.env_steps),
        history=callback.history,
    )


def overrides_to_args(overrides: list[str]) -> list[str]:
    """``["model.init_args.lr=3e-4"]`` → ``["--model.init_args.lr", "3e-4"]``."""
    return [part for kv in overrides for part in ("--" + kv.split("=", 1)[0], kv.split("=", 1)[1])]


def median_or_inf(values: list[float | None]) -> float:
    """Median where a run that never crossed counts as +inf (so a majority of failures gives inf)."""
    return statistics.median([float("inf") if v is None else v for v in values])


def raw_env_rate(num_envs: int, steps: int) -> float:
    """Env steps/s of ``BatchedEnv(CartPole(), num_envs).step`` with uniform-random actions (after a warm-up)."""
    env = BatchedEnv(CartPole(), num_envs, "cpu", seed=0)
    generator = torch.Generator().manual_seed(1)
    env.reset()
    for _ in range(10):  # warm-up
        env.step(torch.randint(0, 2, (num_envs,), generator=generator))
    start = time.perf_counter()
    for _ in range(steps):
        env.step(torch.randint(0, 2, (num_envs,), generator=generator))
    seconds = time.perf_counter() - start
    env.close()
    return steps * num_envs / seconds


def print_summary(rows: list[tuple[str, str, str, str]], verdicts: list[bool], target: str = "target") -> bool | None:
    """Print the ``check / measured / <target> / verdict`` table and the PASS/FAIL lines; return the overall verdict.

    ``None`` when there is nothing to print or no row has a PASS/FAIL verdict (``info`` rows only).
    """
    if not rows:
        return None
    columns = ("check", "measured", target, "verdict")
    widths = [max(len(row[i]) for row in [columns, *rows]) for i in range(4)]
    header = "  ".join(h.ljust(w) for h, w in zip(columns, widths))
    print("\n== Summary ==")
    print(header)
    print("-" * len(header))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    print("-" * len(header))
    for check, measured, criterion, mark in rows:
        if mark in ("PASS", "FAIL"):
            print(f"  {mark}  {check}: {measured}; {criterion}")
    return all(verdicts) if verdicts else None
