"""Behaviour checks (``slow``, excluded by default): the bundled configs learn what their comments promise.

Each runs ``rl-lightning fit`` on a bundled config, unchanged, as a subprocess (what a user types), then reads
the result the way a user would: the eval curve through TensorBoard's own loader, or the final checkpoint in a
fresh process. Run with ``pytest -m slow tests/test_learning_slow.py`` (minutes each on one CPU thread).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

_EVAL_SNIPPET = """
import sys, torch
from rl_lightning.algos import SPO
from rl_lightning.envs import TicTacToe
from rl_lightning.evaluation.episodes import run_episodes
model = SPO.load_from_checkpoint(sys.argv[1], map_location="cpu")
returns, _ = run_episodes(model, TicTacToe(), 200, torch.device("cpu"), seed=2024, deterministic=False)
print(f"{float((returns >= 0).float().mean()):.4f} {float((returns > 0).float().mean()):.4f}")
"""


def _run(args: list[str], cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _fit(config: str, tmp_path: Path) -> Path:
    """``rl-lightning fit --config CONFIG`` from ``tmp_path`` (so ``runs/`` lands there); returns the run dir."""
    _run([sys.executable, "-m", "rl_lightning.cli", "fit", "--config", config], tmp_path, timeout=3600)
    (run_dir,) = [p for p in (tmp_path / "runs").glob("*/version_*") if p.is_dir()]
    return run_dir


def _scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """``(step, value)`` of one scalar as TensorBoard loads it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


def _changes(curve: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The points where the value changes (for a readable printout)."""
    return [(step, round(value, 3)) for i, (step, value) in enumerate(curve) if i == 0 or value != curve[i - 1][1]]


def test_ppo_cartpole_reaches_475_within_the_bundled_budget(tmp_path):
    """``configs/ppo.yaml`` (seed 1, 50k env steps, eval every 10k on 20 episodes) reaches eval return >= 475."""
    curve = _scalars(_fit("ppo.yaml", tmp_path), "eval/episode_return")
    print("PPO CartPole eval/episode_return (step, value) at changes:", _changes(curve))
    assert curve, "no evaluation was logged"
    assert max(value for _, value in curve) >= 475.0, curve
    assert max(step for step, _ in curve) <= 50_000 + 256  # within the budget (rounded up to whole rollouts)


def test_spo_tictactoe_wins_or_draws_against_random(tmp_path):
    """``configs/spo_tictactoe.yaml`` (seed 0, 60k env steps): the final checkpoint, loaded in a fresh process,
    wins or draws >= 0.96 of 200 games against the random opponent with its search policy (the config documents
    0.98 first reached at 30-40k env steps, then a rate fluctuating within ~0.96-0.99; random play is ~0.6)."""
    run_dir = _fit("spo_tictactoe.yaml", tmp_path)
    curve = _scalars(run_dir, "eval/episode_return")
    print("SPO TicTacToe eval/episode_return (step, value) at changes:", _changes(curve))
    (ckpt,) = run_dir.glob("checkpoints/last*.ckpt")
    done = _run([sys.executable, "-c", _EVAL_SNIPPET, str(ckpt)], tmp_path, timeout=1200)
    win_or_draw, win = map(float, done.stdout.split()[-2:])
    print(f"SPO TicTacToe final checkpoint: win-or-draw {win_or_draw:.3f}, win {win:.3f} over 200 games")
    assert win_or_draw >= 0.96
    assert curve[-1][1] > curve[0][1]  # the logged eval return improved over training
