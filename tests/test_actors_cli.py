"""``rl-lightning fit`` with ``data.num_actors`` as a user runs it: an actor killed, an env that always raises,
SIGTERM then ``--ckpt_path last``, and the settings refused before anything starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from rl_lightning.processes.child_processes import pid_alive
from tests.cli_process import CliRun
from tests.cli_subprocess import ERROR_PREFIX, run_cli

# The heavy tier (actor processes killed and replaced mid-fit): not in the default run; CI runs it as a step of its own.
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[1]
ROLLOUT = 4 * 16


def _args(tmp_path: Path, total_env_steps: int, *extra: str) -> list[str]:
    return [
        "fit", "--config", "ppo",
        "--data.init_args.num_envs", "4", "--data.init_args.num_steps", "16",
        "--data.init_args.total_env_steps", str(total_env_steps), "--data.init_args.num_actors", "1",
        "--model.init_args.update_epochs", "1", "--model.init_args.num_minibatches", "2",
        "--model.init_args.hidden_sizes", "[16]",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
        *extra,
    ]  # fmt: skip


def _popen(tmp_path: Path, args: list[str]) -> CliRun:
    return CliRun(args, tmp_path)


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (Linux ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _actor_pids(pid: int) -> list[int]:
    """The actor processes of the fit ``pid``: the children of the fork server it started (multiprocessing's, whose
    command line its forked children keep)."""
    return [child for child in _descendants(pid) if _parent(_parent(child)) == pid and _forkserver(_parent(child))]


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _forkserver(pid: int) -> bool:
    try:
        return b"multiprocessing.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _start_and_mark(tmp_path: Path, budget: int, *extra: str) -> tuple[subprocess.Popen, list[int]]:
    """Start a fit; return once 3 updates are done, with the actor process ids then alive."""
    marker = tmp_path / "marker"
    fragment = tmp_path / "mark.yaml"
    fragment.write_text(
        "trainer:\n  callbacks+:\n    - class_path: tests.fault_envs.MarkAfterUpdates\n"
        f"      init_args: {{path: {marker}, updates: 3, sleep_s: 0.1}}\n"
    )
    proc = _popen(tmp_path, [*_args(tmp_path, budget, *extra), "--config", str(fragment)])
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), proc.communicate()[1] if proc.poll() is not None else "no marker within 120 s"
    return proc, _actor_pids(proc.pid)


def _last_checkpoint(tmp_path: Path, version: int) -> dict:
    path = tmp_path / "runs" / "ppo_cartpole" / f"version_{version}" / "checkpoints" / "last.ckpt"
    return torch.load(path, map_location="cpu", weights_only=False)


def _scalars(tmp_path: Path, tag: str) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = (tmp_path / "runs" / "ppo_cartpole" / "version_0").glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    return [event.value for event in accumulator.Scalars(tag)]


def _gone(pids: list[int], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(pid_alive(pid) for pid in pids)


@pytest.mark.parametrize("lag", [1, 2])
def test_an_actor_killed_mid_fit_is_replaced_and_the_fit_completes_its_budget(tmp_path, lag):
    budget = 60 * ROLLOUT
    proc, actors = _start_and_mark(tmp_path, budget, "--data.init_args.max_policy_lag", str(lag))
    assert len(actors) == 1, actors
    os.kill(actors[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    saved = _last_checkpoint(tmp_path, 0)
    assert saved["OnPolicyDataModule"]["local_env_steps"] == budget  # lost work is not counted: the exact budget
    assert saved["rl_counters"]["updates"] == 60  # and every update of it
    assert _scalars(tmp_path, "actors/restarts")[-1] == 1.0
    replaced = [line for line in err.splitlines() if " replaced with fresh seeds" in line]
    assert len(replaced) == 1, err
    assert "actor 0 " in replaced[0], replaced
    assert "killed by SIGKILL" in replaced[0], replaced
    assert "rl-lightning: actors: 1 replaced during the run" in err, err  # the end-of-run summary


@pytest.mark.parametrize("lag", [pytest.param(1, marks=pytest.mark.slow), 2])  # lag 2 holds rollouts: the harder case
def test_a_users_env_that_raises_once_is_said_in_one_line_and_the_fit_completes_its_budget(tmp_path, lag):
    env = {"class_path": "tests.actor_envs.RaisesOnceCartPole", "init_args": {"marker": str(tmp_path / "raised")}}
    budget = 12 * ROLLOUT
    extra = ["--data.init_args.env", json.dumps(env), "--data.init_args.max_policy_lag", str(lag)]
    result = run_cli([*_args(tmp_path, budget, *extra)], tmp_path)
    assert result.returncode == 0, result.stderr
    replaced = [line for line in result.stderr.splitlines() if " replaced with fresh seeds" in line]
    assert len(replaced) == 1, result.stderr
    assert "RuntimeError: contact solver diverged at call 40" in replaced[0], replaced
    saved = _last_checkpoint(tmp_path, 0)
    assert saved["OnPolicyDataModule"]["local_env_steps"] == budget
    assert saved["rl_counters"]["updates"] == 12


@pytest.mark.parametrize("lag", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_an_env_that_always_raises_stops_the_run_with_a_checkpoint_and_one_line(tmp_path, lag):
    # the first actor raises at its 40th tick (its 3rd rollout, after 2 updates); every restart at its first tick; at
    # lag 2 the 2nd rollout, finished before the actor failed, is still used
    env = {"class_path": "tests.actor_envs.BreaksForGoodCartPole", "init_args": {"marker": str(tmp_path / "broken")}}
    args = _args(
        tmp_path, 20 * ROLLOUT, "--data.init_args.env", json.dumps(env), "--data.init_args.max_policy_lag", str(lag)
    )
    result = run_cli([*args, "--data.init_args.actor_max_failures", "2"], tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    line = lines[0]
    assert "env 'CartPole'" in line, line
    assert "failed 2 times in a row" in line, line
    assert "RuntimeError: simulator broke at call 1" in line, line
    assert "checkpoint of update 2 saved to" in line, line
    saved = _last_checkpoint(tmp_path, 0)
    assert saved["rl_counters"]["updates"] == 2
    assert saved["OnPolicyDataModule"]["local_env_steps"] == 2 * ROLLOUT


def test_sigterm_leaves_a_checkpoint_and_no_actor_alive_then_resume_finishes_the_budget(tmp_path):
    proc, actors = _start_and_mark(tmp_path, 1000 * ROLLOUT)
    children = _descendants(proc.pid)
    assert actors
    assert set(actors) <= set(children)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert _gone(children), [pid for pid in children if pid_alive(pid)]
    saved = _last_checkpoint(tmp_path, 0)
    updates = saved["rl_counters"]["updates"]
    assert updates >= 3
    assert saved["OnPolicyDataModule"]["local_env_steps"] == updates * ROLLOUT
    assert saved["OnPolicyDataModule"]["actor_generation"] == 1

    budget = (updates + 3) * ROLLOUT
    result = run_cli([*_args(tmp_path, budget), "--ckpt_path", "last"], tmp_path)
    assert result.returncode == 0, result.stderr
    resumed = _last_checkpoint(tmp_path, 1)
    assert resumed["rl_counters"]["updates"] == updates + 3
    assert resumed["rl_counters"]["parent_version"] == updates
    assert resumed["OnPolicyDataModule"]["local_env_steps"] == budget
    assert resumed["OnPolicyDataModule"]["actor_generation"] == 2  # the resumed actors drew fresh seeds


def test_a_sigkilled_learner_takes_even_a_hung_actor_and_the_fork_server_with_it(tmp_path):
    """SIGKILL leaves the learner no say, and an actor stuck inside an env step reads neither its pipe nor the stop
    flag; its parent, the fork server, outlives the learner while the actor lives. The actor must still die within
    a second or two (it watches the learner's pid), and the server with it."""
    marker = tmp_path / "hung"
    env = {"class_path": "tests.actor_envs.HangOnceCartPole", "init_args": {"marker": str(marker), "hang_at": 40}}
    args = _args(tmp_path, 1000 * ROLLOUT, "--data.init_args.env", json.dumps(env))
    proc = _popen(tmp_path, [*args, "--data.init_args.actor_heartbeat_s", "600"])  # the learner waits on it
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), proc.communicate()[1] if proc.poll() is not None else "the actor never hung"
    children, actors = _descendants(proc.pid), _actor_pids(proc.pid)
    assert len(actors) == 1, actors
    proc.kill()
    proc.communicate(timeout=60)
    assert _gone(children, within_s=10), [pid for pid in children if pid_alive(pid)]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="lending a core needs a second core")
def test_a_learner_borrowing_idle_actor_cores_runs_a_second_thread_while_its_actor_waits(tmp_path):
    """A learner slowed on purpose (40 epochs a rollout) at one thread of its own: its actor collects a rollout in a
    fraction of an update and then waits, so most optimiser steps run on two threads (``perf/learner_threads``)."""
    extra = ["--num_threads", "1", "--data.init_args.borrow_idle_actor_cores", "true",
             "--model.init_args.update_epochs", "40"]  # fmt: skip
    result = run_cli(_args(tmp_path, 6 * ROLLOUT, *extra), tmp_path)
    assert result.returncode == 0, result.stderr
    threads = _scalars(tmp_path, "perf/learner_threads")
    assert len(threads) == 5, threads  # logged with each rollout, over the update before it: from the second on
    assert all(1.0 <= value <= 2.0 for value in threads), threads
    assert sorted(threads)[3] > 1.5, threads  # the actor waits through most of each update


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--data.init_args.max_policy_lag", "0"], "data.max_policy_lag=0: must be >= 1"),
        (["--data.init_args.num_actors", "8"], "data.num_actors=8 does not split data.num_envs=4"),
        (["--data.init_args.num_actors", "3"], "data.num_actors=3 does not split data.num_envs=4"),  # 4 % 3
        (["--data.init_args.env", "tests.actor_envs.LockedCartPole"], "LockedCartPole cannot be pickled"),
        (["--data.init_args.actor_env_splits", "3"], "data.actor_env_splits=3: must be 1 (off) or 2"),
        (
            ["--data.init_args.num_actors", "0", "--data.init_args.borrow_idle_actor_cores", "true"],
            "data.borrow_idle_actor_cores=true lends the learner the cores of idle actor processes, but "
            "data.num_actors=0",
        ),
        (
            ["--data.init_args.actor_backend", "ray", "--data.init_args.borrow_idle_actor_cores", "true"],
            "Ray actors may run elsewhere: set data.actor_backend: processes",
        ),
    ],
    ids=["lag", "actors-over-envs", "actors-not-dividing-envs", "unpicklable-env", "env-splits",
         "borrow-without-actors", "borrow-on-ray"],  # fmt: skip
)
def test_bad_actor_settings_are_refused_in_one_line_before_anything_starts(tmp_path, extra, expected):
    result = run_cli([*_args(tmp_path, 10 * ROLLOUT), *extra], tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, result.stderr
    assert expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("*.ckpt"))
