"""A BC clone is judged and shipped like any policy (subprocesses): ``rl-lightning test`` plays it with PPO's game
evaluation, ``rl-lightning export`` writes it; BC's progress bar counts training rows, not env steps."""

from __future__ import annotations

import pytest

from tests.cli_subprocess import error_line, run_cli

pytest.importorskip("pyspiel", reason='needs pip install -e ".[games]"')

BOT = "rl_lightning.envs.games.bots.HeartsHeuristic"
SMALL = ["--model.init_args.hidden_sizes", "[32]", "--model.init_args.encoder", "hearts"]
PANEL = """trainer:
  callbacks:
    - class_path: rl_lightning.callbacks.GameEvaluation
      init_args: {every_n_env_steps: 100000, opponents: [random], num_games: 8, rating_games: 0}
"""


@pytest.fixture(scope="module")
def bc_checkpoint(tmp_path_factory):
    work = tmp_path_factory.mktemp("bc")
    recorded = run_cli(["record", "--config", "ppo_hearts.yaml", "--bot", BOT, "--games", "8", "--out", "rec"], work)
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    bc = run_cli(["fit", "--config", "bc_hearts.yaml", "--data.init_args.path", "rec", "--trainer.max_epochs", "2",
                  *SMALL, "--trainer.logger.init_args.save_dir", "runs"], work)  # fmt: skip
    assert bc.returncode == 0, bc.stderr[-3000:]
    return work, next((work / "runs" / "bc_hearts").iterdir()) / "checkpoints" / "last.ckpt", bc.stdout + bc.stderr


def test_bc_progress_bar_counts_training_rows(bc_checkpoint):
    _, _, output = bc_checkpoint
    assert " samples" in output
    assert "env steps" not in output


def test_a_bc_checkpoint_is_tested_with_ppo_game_evaluation(bc_checkpoint, monkeypatch):
    work, ckpt, _ = bc_checkpoint
    monkeypatch.delenv("COLUMNS", raising=False)  # a width the user sets is kept; CI runners often set 80
    monkeypatch.setenv("FORCE_COLOR", "1")  # CI runners' way to get colours in logs: still a pipe, still wide
    monkeypatch.setenv("TERM", "dumb")
    (work / "panel.yaml").write_text(PANEL)
    args = ["--config", "ppo_hearts.yaml", "--config", "panel.yaml", *SMALL, "--ckpt_path", str(ckpt),
            "--trainer.logger.init_args.save_dir", "runs", "--trainer.enable_progress_bar", "false"]  # fmt: skip
    tested = run_cli(["test", *args], work)
    assert tested.returncode == 0, tested.stderr[-3000:]
    # Piped output keeps whole metric names (Rich cut them to fit 80 columns: "test/vs_random/baseline_points_per_h…",
    # and against the heuristic the four seats read "...points_per_hand_s…").
    assert "…" not in tested.stdout, tested.stdout
    for name in ("baseline_points_per_hand", *(f"points_per_hand_seat{seat}" for seat in range(4))):
        assert f" test/vs_random/{name} " in tested.stdout, tested.stdout
    # Resuming PPO training from a clone is still refused: a fresh PPO run starts from it with init_weights.
    line = error_line(run_cli(["fit", *args], work))
    assert "was written by algorithm family 'bc', but the model is 'ppo'" in line


def test_a_bc_checkpoint_exports_to_onnx(bc_checkpoint):
    work, ckpt, _ = bc_checkpoint
    exported = run_cli(["export", "--ckpt_path", str(ckpt), "--format", "onnx", "--out", "clone.onnx"], work)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert "inputs: obs float32[B,5088], action_mask bool[B,52]" in exported.stdout
    assert (work / "clone.onnx").stat().st_size > 0
