"""What a new user sees on a first ``rl-lightning fit --config ppo.yaml``: no warning they cannot act on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# How warnings reach a terminal: Python's "file.py:LINE: Category: msg", Lightning's shorter "file.py:LINE: msg"
# (it drops the category for its own warnings), and Lightning's INFO-level "💡 Tip:" adverts.
WARNING_LINE = re.compile(r"\.py:\d+: |warn|💡|Tip:", re.IGNORECASE)


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
    output = (done.stdout + done.stderr).splitlines()
    assert [line for line in output if WARNING_LINE.search(line)] == []
