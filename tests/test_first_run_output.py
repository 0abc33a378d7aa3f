"""What a new user sees on a first ``rl-lightning fit --config ppo.yaml``: no warning they cannot act on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.warning_lines import warning_lines

ROOT = Path(__file__).resolve().parents[1]


def test_first_fit_of_ppo_yaml_prints_no_warning(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}  # Python's default filters, as a user has
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    command = [
        sys.executable, "-m", "rl_lightning.cli", "fit", "--config", "ppo.yaml",
        "--data.init_args.num_steps", "16", "--data.init_args.total_env_steps", "256",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list((tmp_path / "runs").rglob("events.out.tfevents.*")), "the run logged nothing: not a real first fit"
    assert warning_lines(done.stdout + done.stderr) == []
