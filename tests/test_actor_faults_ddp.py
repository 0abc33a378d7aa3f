"""Actor faults under DDP (two gloo CPU ranks, one actor process each) through ``rl-lightning fit`` as a user runs
it: a user's env that raises once, one broken for good on one rank or on both, a hung env, envs that raise every
few rollouts. What the user sees: the exit code, the one-line messages, the checkpoint's counters, both ranks' update
counts, and no process left behind.

The SIGKILLed actor under DDP is ``tests/test_ddp.py``'s ``ppo_actors_kill`` case. Each fit costs ~20-40 s on two
cores (two ranks, two actors, two fork servers): the slow tier."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rl_lightning.processes.child_processes import pid_alive
from tests.cli_process import CliRun
from tests.cli_subprocess import ERROR_PREFIX
from tests.test_actors_cli import ROLLOUT, _args, _descendants, _gone, _last_checkpoint

pytestmark = pytest.mark.slow

RANKS = 2
DDP = ["--trainer.strategy", "ddp", "--trainer.devices", str(RANKS), "--trainer.accelerator", "cpu"]
UPDATE = RANKS * ROLLOUT  # env steps of one update, over both ranks


def _fit(tmp_path: Path, updates: int, env: dict, *extra: str) -> tuple[int, str, dict[int, bytes]]:
    """Run a two-rank fit of ``updates`` updates collecting ``env`` in one actor per rank (``watched``), each rank
    writing its counters at the end (``RecordRankEnd``)."""
    fragment = tmp_path / "record.yaml"
    fragment.write_text(
        "trainer:\n  callbacks+:\n    - class_path: tests.fault_envs.RecordRankEnd\n"
        f"      init_args: {{directory: {tmp_path}}}\n"
    )
    args = _args(tmp_path, updates * UPDATE, "--data.init_args.env", json.dumps(env), *DDP, *extra)
    return watched(tmp_path, [*args, "--config", str(fragment)])


def watched(tmp_path: Path, args: list[str], timeout: float = 240) -> tuple[int, str, dict[int, bytes]]:
    """``rl-lightning ARGS`` in ``tmp_path``: its exit code, its output and every process seen below it while it ran
    (DDP ranks, fork servers, actors and their replacements, Ray's processes), with its command line.

    The envs come from this checkout's ``tests`` package, put in the run's working directory as a user's env module
    sits beside their config: a DDP rank 1, a fresh interpreter, imports it from there (the CLI puts the working
    directory on the path, and the actors unpickle their env with it)."""
    (tmp_path / "tests").symlink_to(Path(__file__).resolve().parent, target_is_directory=True)
    proc = CliRun(args, tmp_path)
    seen: dict[int, bytes] = {}
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:  # a rank that hangs fails here, not in CI's timeout
        for pid in _descendants(proc.pid):
            if pid not in seen:
                seen[pid] = _command(pid)
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
    _, out = proc.communicate(timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out, seen


def _command(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _ranks(tmp_path: Path) -> list[dict]:
    return [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(RANKS)]


def _replaced(out: str) -> list[str]:
    return [line for line in out.splitlines() if " replaced with fresh seeds" in line]


def _assert_no_process_left(seen: dict[int, bytes]) -> None:
    assert sum(b"rl_lightning.cli" in command for command in seen.values()) == RANKS - 1, seen  # rank 1 was seen
    assert sum(b"forkserver" in command for command in seen.values()) >= RANKS, seen  # and each rank's actors
    assert_gone(seen)


def assert_gone(seen: dict[int, bytes], within_s: float = 10.0) -> None:
    """Every process of ``seen`` ends within ``within_s`` of the run's end (none is left behind)."""
    assert _gone(list(seen), within_s), {pid: command for pid, command in seen.items() if pid_alive(pid)}


@pytest.mark.parametrize("lag", [1, 2])
def test_a_users_env_that_raises_once_on_one_rank_is_replaced_and_both_ranks_finish_the_exact_budget(tmp_path, lag):
    env = {"class_path": "tests.actor_envs.RaisesOnceCartPole", "init_args": {"marker": str(tmp_path / "raised")}}
    code, out, seen = _fit(tmp_path, 12, env, "--data.init_args.max_policy_lag", str(lag))
    assert code == 0, out[-3000:]
    replaced = _replaced(out)
    assert len(replaced) == 1, out[-3000:]  # the first actor to reach its 40th tick raised; the other never did
    line = replaced[0]
    assert line.startswith("rl-lightning: actor 0 on rank "), line
    assert "RuntimeError: contact solver diverged at call 40" in line, line
    rank = line.removeprefix("rl-lightning: actor 0 on rank ").split()[0]
    assert f"rl-lightning: actors on rank {rank}: 1 replaced during the run" in out, out[-3000:]
    saved = _last_checkpoint(tmp_path, 0)
    assert saved["rl_counters"]["updates"] == 12
    assert saved["OnPolicyDataModule"]["env_steps"] == 12 * UPDATE  # the lost rollout is not counted on either rank
    assert saved["OnPolicyDataModule"]["local_env_steps"] == 12 * ROLLOUT
    assert _ranks(tmp_path) == [{"updates": 12, "env_steps": 12 * UPDATE, "local_env_steps": 12 * ROLLOUT}] * RANKS
    _assert_no_process_left(seen)


@pytest.mark.parametrize("broken", ["both ranks", "rank 0", "rank 1"])
def test_an_env_that_always_raises_stops_both_ranks_with_a_checkpoint_and_one_line(tmp_path, broken):
    """The first actor breaks at its 40th tick (its 3rd rollout, after 2 updates), every restart at its first; with
    ``actor_max_failures: 2`` its rank stops, and the other with it in the same update (on one rank only, the other
    would otherwise wait for it in a collective). The run says the error once, on rank 0, with its checkpoint."""
    marker = str(tmp_path / "broken")
    if broken == "both ranks":  # a simulator broken for good on the machine: every rank's actors meet it
        env = {"class_path": "tests.actor_envs.BreaksForGoodCartPole", "init_args": {"marker": marker}}
        failing = 0  # the first rank's error is the one said
    else:
        failing = int(broken.split()[1])
        env = {"class_path": "tests.actor_envs.BreaksOnOneRankCartPole",
               "init_args": {"marker": marker, "rank": failing}}  # fmt: skip
    code, out, seen = _fit(tmp_path, 20, env, "--data.init_args.actor_max_failures", "2")
    assert code == 2, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    lines = [line for line in out.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, out[-3000:]  # one line for the run, rank 0's (the other ranks stop quietly with it)
    line = lines[0]
    assert f"env 'CartPole' on DDP rank {failing} in actor 0: " in line, line
    assert "failed 2 times in a row" in line, line
    assert "RuntimeError: simulator broke at call 1" in line, line
    assert "checkpoint of update 2 saved to" in line, line
    saved = _last_checkpoint(tmp_path, 0)
    assert saved["rl_counters"]["updates"] == 2
    assert saved["OnPolicyDataModule"]["env_steps"] == 2 * UPDATE
    assert saved["OnPolicyDataModule"]["local_env_steps"] == 2 * ROLLOUT
    _assert_no_process_left(seen)


@pytest.mark.parametrize("lag", [1, 2])
def test_a_hung_env_on_one_rank_is_replaced_after_the_heartbeat_and_both_ranks_finish_the_exact_budget(tmp_path, lag):
    env = {"class_path": "tests.actor_envs.HangOnceCartPole",
           "init_args": {"marker": str(tmp_path / "hung"), "hang_at": 40}}  # fmt: skip
    extra = ["--data.init_args.actor_heartbeat_s", "3", "--data.init_args.max_policy_lag", str(lag)]
    code, out, seen = _fit(tmp_path, 8, env, *extra)
    assert code == 0, out[-3000:]
    replaced = _replaced(out)
    assert len(replaced) == 1, out[-3000:]
    assert replaced[0].startswith("rl-lightning: actor 0 on rank "), replaced
    assert "no heartbeat for 3 s (hung env?)" in replaced[0], replaced
    saved = _last_checkpoint(tmp_path, 0)
    assert saved["rl_counters"]["updates"] == 8
    assert saved["OnPolicyDataModule"]["env_steps"] == 8 * UPDATE
    assert _ranks(tmp_path) == [{"updates": 8, "env_steps": 8 * UPDATE, "local_env_steps": 8 * ROLLOUT}] * RANKS
    _assert_no_process_left(seen)


def test_envs_that_raise_every_few_rollouts_on_both_ranks_are_replaced_each_time_and_both_finish_the_budget(tmp_path):
    """Every actor's env raises at its 40th tick (two good rollouts of 16 ticks, then the third fails), on both ranks:
    12 updates take 6 actors a rank, 5 of them replacements, each said in one line naming its rank; a good rollout
    resets the failure streak, so ``actor_max_failures: 2`` never stops the run."""
    env = {"class_path": "tests.actor_envs.RaisesInActorsCartPole", "init_args": {"fail_at": 40}}
    code, out, seen = _fit(tmp_path, 12, env, "--data.init_args.actor_max_failures", "2")
    assert code == 0, out[-3000:]
    for rank in range(RANKS):
        mine = [line for line in _replaced(out) if line.startswith(f"rl-lightning: actor 0 on rank {rank} replaced")]
        assert len(mine) == 5, out[-3000:]
        assert all("RuntimeError: contact solver diverged at call 40" in line for line in mine), mine
        assert f"rl-lightning: actors on rank {rank}: 5 replaced during the run, 5 rollout(s) lost" in out
    assert len(_replaced(out)) == 5 * RANKS, out[-3000:]
    saved = _last_checkpoint(tmp_path, 0)
    assert saved["rl_counters"]["updates"] == 12
    assert saved["OnPolicyDataModule"]["env_steps"] == 12 * UPDATE
    assert _ranks(tmp_path) == [{"updates": 12, "env_steps": 12 * UPDATE, "local_env_steps": 12 * ROLLOUT}] * RANKS
    _assert_no_process_left(seen)
