"""Several ``rl-lightning tune`` workers on one SQLite study, and a worker SIGKILLed mid-trial then restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rl_lightning.processes.child_processes import pid_alive
from tests.cli_subprocess import ROOT
from tests.test_actors_cli import _descendants, _gone

# The heavy tier (tune studies with worker processes): not in the default run; CI runs it as a step of its own.
pytestmark = pytest.mark.heavy

optuna = pytest.importorskip("optuna")

FAST = [
    "--data.init_args.num_envs", "4", "--data.init_args.num_steps", "16", "--data.init_args.total_env_steps", "384",
    "--model.init_args.update_epochs", "2",
]  # fmt: skip
EVAL = {"trainer": {"callbacks+": [{"class_path": "rl_lightning.callbacks.Evaluation",
                                     "init_args": {"every_n_env_steps": 128, "num_episodes": 2}}]}}  # fmt: skip


def _tune(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    (tmp_path / "search.yaml").write_text(yaml.safe_dump({"model.init_args.ent_coef": {"low": 0.0, "high": 0.05}}))
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(EVAL))
    args = ["tune", "--config", "ppo.yaml", "--config", "eval.yaml", "--search", "search.yaml", "--dir", "study",
            "--pruner", "none", *FAST, *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "rl_lightning.cli", *args]
    return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _study(tmp_path: Path):
    return optuna.load_study(study_name="ppo", storage=f"sqlite:///{tmp_path / 'study' / 'study.db'}")


def test_two_workers_on_one_sqlite_study_finish_n_trials_without_duplicates(tmp_path):
    workers = [_tune(tmp_path, "--n_trials", "3", "--sampler_seed", str(seed)) for seed in (1, 2)]
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    trials = _study(tmp_path).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    assert sorted(t.number for t in trials) == [0, 1, 2]
    ran = sorted(p.name for p in (tmp_path / "study").glob("trial_*"))
    assert ran == ["trial_0000", "trial_0001", "trial_0002"]


def test_sigkilled_worker_trial_is_retried_once_and_the_study_completes(tmp_path):
    """SIGKILL the only worker while trial 0's fit runs; a restarted worker fails the stale trial (heartbeat),
    runs its parameters again, and the study ends with exactly 2 completed trials, the killed one counted once.

    Both starts give ``--sampler_seed 7``: the restarted worker must still draw new parameters (the same seed alone
    would replay its first draw, the killed trial's, and run that parameter set twice)."""
    args = ("--n_trials", "2", "--heartbeat", "1", "--sampler_seed", "7")
    first = _tune(tmp_path, *args, "--data.init_args.total_env_steps", "100000")  # killed long before its end
    report = tmp_path / "study" / "trial_0000" / "seed_0" / "evaluations.jsonl"
    deadline = time.monotonic() + 300
    while not (report.is_file() and report.read_text()) and time.monotonic() < deadline:  # mid-trial: one eval in
        assert first.poll() is None, first.communicate()[0][-3000:]
        time.sleep(0.2)
    below = _descendants(first.pid)  # its fork server and the trial's fit, forked from it
    assert len(below) >= 2, below
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)
    assert _gone(below, within_s=30), [pid for pid in below if pid_alive(pid)]
    log = (tmp_path / "study" / "trial_0000" / "seed_0" / "output.log").read_text()
    assert "rl-lightning: error: stopped by SIGTERM" in log, log[-2000:]  # stopped with its worker, not run out
    killed = _study(tmp_path).get_trials()
    assert [t.state.name for t in killed] == ["RUNNING"]
    second = _tune(tmp_path, *args)
    output = second.communicate(timeout=600)[0]
    assert second.returncode == 0, output[-3000:]
    trials = _study(tmp_path).get_trials()
    states = [t.state.name for t in trials]
    assert states.count("COMPLETE") == 2, states
    assert states.count("RUNNING") == 0, states
    assert trials[0].state.name == "FAIL"
    value = killed[0].params["model.init_args.ent_coef"]
    completed = [t.params["model.init_args.ent_coef"] for t in trials if t.state.name == "COMPLETE"]
    assert completed.count(value) == 1, (value, completed)
    assert len(set(completed)) == len(completed) == 2, f"a parameter set ran twice: {completed}"
