"""Ray actors that fail under DDP (two gloo CPU ranks, one Ray actor each, both ranks drivers of one Ray cluster the
test starts) through ``rl-lightning fit`` as a user runs it: an env that raises once on one rank, one broken for good
on one rank, a Ray actor SIGKILLed by pid from outside, a hung env, a node lost. What the user sees: the exit code,
the one-line messages, the checkpoint's counters, both ranks' update counts, and no process left behind (the ranks,
the actors while the cluster is still up, then the cluster's raylet, GCS and workers once it is shut down).

Each test costs ~50-80 s on two shared cores (a cluster, two ranks each a Ray driver, two actors): the slow tier."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli_process import CliRun
from tests.cli_subprocess import ERROR_PREFIX, cli_environ
from tests.test_actor_faults_ddp import DDP, RANKS, UPDATE, _command, _ranks, _replaced, assert_gone
from tests.test_actors_cli import ROLLOUT, _args, _descendants, _last_checkpoint

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow

RAY_ACTOR = b"ray::RayActor"


class _Cluster:
    """A Ray cluster on this machine whose workers import this checkout, and every process it ran: a head of
    ``head_cpus`` CPUs (3: two actors and a replacement's room) and, with ``second_cpus``, a second node."""

    def __init__(self, head_cpus: int = 3, second_cpus: int = 0) -> None:
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus, "include_dashboard": False})
        self.second = self.cluster.add_node(num_cpus=second_cpus) if second_cpus else None
        nodes = [self.cluster.head_node, *([self.second] if self.second else [])]
        self.roots = [info.process.pid for node in nodes for infos in node.all_processes.values() for info in infos]
        self.seen = {pid: _command(pid) for pid in self.roots}  # with their command lines
        self.actors: set[int] = set()  # the Ray actors' worker processes (``ray::RayActor...``)
        self.up = True

    def look(self) -> None:
        for pid in [pid for root in self.roots for pid in _descendants(root)]:
            command = _command(pid)
            self.seen.setdefault(pid, command)
            if RAY_ACTOR in command:
                self.actors.add(pid)

    def shutdown(self) -> None:
        if self.up:
            self.up = False
            self.cluster.shutdown()


@pytest.fixture
def cluster(monkeypatch, request) -> Iterator[_Cluster]:
    """``_Cluster()``, or ``_Cluster(**request.param)`` when parametrised indirectly; shut down on every exit path."""
    monkeypatch.setenv("PYTHONPATH", cli_environ()["PYTHONPATH"])  # as a real cluster's nodes have the package
    started = _Cluster(**getattr(request, "param", {}))
    try:
        yield started
    finally:
        started.shutdown()


def _fit(
    tmp_path: Path, cluster: _Cluster, updates: int, env: dict, *extra: str, tick: Callable[[], None] | None = None
) -> tuple[int, str, dict[int, bytes]]:
    """A two-rank fit of ``updates`` updates, one Ray actor per rank on ``cluster``, each rank writing its counters
    at the end (``RecordRankEnd``): its exit code, output and the processes seen below it (``tick`` runs at each
    look, e.g. to kill an actor)."""
    callbacks = f"    - class_path: tests.fault_envs.RecordRankEnd\n      init_args: {{directory: {tmp_path}}}\n"
    if tick is not None:  # ``marker`` once 3 updates are done, then a pause per update: the run is still going
        callbacks += (
            "    - class_path: tests.fault_envs.MarkAfterUpdates\n"
            f"      init_args: {{path: {tmp_path / 'marker'}, updates: 3, sleep_s: 0.2}}\n"
        )
    fragment = tmp_path / "record.yaml"
    fragment.write_text("trainer:\n  callbacks+:\n" + callbacks)
    ray_args = ["--data.init_args.actor_backend", "ray", "--data.init_args.ray_address", cluster.cluster.address]
    args = _args(tmp_path, updates * UPDATE, "--data.init_args.env", json.dumps(env), *DDP, *ray_args, *extra)
    (tmp_path / "tests").symlink_to(Path(__file__).resolve().parent, target_is_directory=True)  # a user's env module
    proc = CliRun([*args, "--config", str(fragment)], tmp_path)
    seen: dict[int, bytes] = {}
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:  # a rank that hangs fails here, not in CI's timeout
        for pid in _descendants(proc.pid):
            seen.setdefault(pid, _command(pid))
        cluster.look()
        if tick is not None:
            tick()
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
    _, out = proc.communicate(timeout=60)
    return proc.returncode, out, seen


def _assert_no_process_left(seen: dict[int, bytes], cluster: _Cluster, actors: int) -> None:
    """The ranks end; ``actors`` Ray actors ran and the run killed every one (the cluster still up); then the
    cluster's shutdown leaves none of its processes (raylet, GCS, workers)."""
    assert sum(b"rl_lightning.cli" in command for command in seen.values()) == RANKS - 1, seen  # rank 1 was seen
    assert_gone(seen)
    assert len(cluster.actors) == actors, cluster.actors
    assert_gone(dict.fromkeys(cluster.actors, RAY_ACTOR), within_s=20)
    cluster.shutdown()
    assert_gone(cluster.seen, within_s=20)


def _assert_exact_budget(tmp_path: Path, updates: int) -> None:
    saved = _last_checkpoint(tmp_path, 0)
    assert saved["rl_counters"]["updates"] == updates
    assert saved["OnPolicyDataModule"]["env_steps"] == updates * UPDATE  # the lost rollout counted on neither rank
    assert saved["OnPolicyDataModule"]["local_env_steps"] == updates * ROLLOUT
    expected = {"updates": updates, "env_steps": updates * UPDATE, "local_env_steps": updates * ROLLOUT}
    assert _ranks(tmp_path) == [expected] * RANKS


def _one_replacement(out: str) -> str:
    replaced = _replaced(out)
    assert len(replaced) == 1, out[-3000:]
    line = replaced[0]
    assert line.startswith("rl-lightning: actor 0 on rank "), line
    rank = line.removeprefix("rl-lightning: actor 0 on rank ").split()[0]
    assert f"rl-lightning: actors on rank {rank}: 1 replaced during the run, 1 rollout(s) lost" in out, out[-3000:]
    return line


@pytest.mark.parametrize("lag", [1, 2])
def test_a_ray_actors_env_that_raises_once_on_one_rank_is_replaced_and_both_ranks_finish_the_exact_budget(
    tmp_path, cluster, lag
):
    env = {"class_path": "tests.actor_envs.RaisesOnceCartPole", "init_args": {"marker": str(tmp_path / "raised")}}
    code, out, seen = _fit(tmp_path, cluster, 8, env, "--data.init_args.max_policy_lag", str(lag))
    assert code == 0, out[-3000:]
    line = _one_replacement(out)  # the first actor to reach its 40th tick raised; the other never did
    assert "RuntimeError: contact solver diverged at call 40" in line, line
    _assert_exact_budget(tmp_path, 8)
    _assert_no_process_left(seen, cluster, actors=3)


def test_a_ray_actors_env_that_always_raises_on_one_rank_stops_both_ranks_with_a_checkpoint_and_one_line(
    tmp_path, cluster
):
    """Rank 1's actor breaks at its 40th tick (its 3rd rollout, after 2 updates), its restart at its first; with
    ``actor_max_failures: 2`` rank 1 stops, and rank 0 with it in the same update. The run says the error once, on
    rank 0, with its checkpoint."""
    env = {"class_path": "tests.actor_envs.BreaksOnTheBuildersRankCartPole",
           "init_args": {"marker": str(tmp_path / "broken"), "rank": 1}}  # fmt: skip
    code, out, seen = _fit(tmp_path, cluster, 20, env, "--data.init_args.actor_max_failures", "2")
    assert code == 2, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    lines = [line for line in out.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, out[-3000:]
    line = lines[0]
    assert "env 'CartPole' on DDP rank 1 in actor 0: " in line, line
    assert "failed 2 times in a row" in line, line
    assert "RuntimeError: simulator broke at call 1 on rank 1" in line, line
    assert "checkpoint of update 2 saved to" in line, line
    saved = _last_checkpoint(tmp_path, 0)
    assert saved["rl_counters"]["updates"] == 2
    assert saved["OnPolicyDataModule"]["env_steps"] == 2 * UPDATE
    assert saved["OnPolicyDataModule"]["local_env_steps"] == 2 * ROLLOUT
    assert not list(tmp_path.glob("rank*.json"))  # neither rank ended its fit normally
    _assert_no_process_left(seen, cluster, actors=3)


@pytest.mark.parametrize("lag", [1, 2])
def test_a_ray_actor_sigkilled_by_pid_on_one_rank_is_replaced_and_both_ranks_finish_the_exact_budget(
    tmp_path, cluster, lag
):
    killed: list[int] = []

    def kill_one_actor_after_update_3() -> None:
        if not killed and (tmp_path / "marker").exists() and len(cluster.actors) == RANKS:
            killed.append(min(cluster.actors))
            os.kill(killed[0], signal.SIGKILL)

    code, out, seen = _fit(
        tmp_path, cluster, 10, {"class_path": "rl_lightning.envs.CartPole"},
        "--data.init_args.max_policy_lag", str(lag), tick=kill_one_actor_after_update_3,
    )  # fmt: skip
    assert code == 0, out[-3000:]
    assert killed, out[-3000:]
    line = _one_replacement(out)
    assert "ActorDiedError" in line, line
    _assert_exact_budget(tmp_path, 10)
    _assert_no_process_left(seen, cluster, actors=3)


def test_a_hung_ray_actor_on_one_rank_is_replaced_after_the_heartbeat_and_both_ranks_finish_the_exact_budget(
    tmp_path, cluster
):
    env = {"class_path": "tests.actor_envs.HangOnceCartPole",
           "init_args": {"marker": str(tmp_path / "hung"), "hang_at": 40}}  # fmt: skip
    code, out, seen = _fit(tmp_path, cluster, 8, env, "--data.init_args.actor_heartbeat_s", "3")
    assert code == 0, out[-3000:]
    line = _one_replacement(out)
    assert "no rollout for 3 s (hung env?)" in line, line
    _assert_exact_budget(tmp_path, 8)
    _assert_no_process_left(seen, cluster, actors=3)


@pytest.mark.parametrize("cluster", [{"head_cpus": 2, "second_cpus": 1}], indirect=True, ids=["two_nodes"])
def test_a_node_lost_under_two_ranks_has_its_ray_actor_replaced_on_the_head_and_both_ranks_finish_the_budget(
    tmp_path, cluster
):
    """Actors fill the nodes other than their learner's first: one rank's actor lands on the second node's one CPU,
    the other rank's on the head. The second node is removed after update 3; its actor is replaced on the head's
    free CPU."""
    removed: list[bool] = []

    def remove_the_second_node_after_update_3() -> None:
        if not removed and (tmp_path / "marker").exists() and len(cluster.actors) == RANKS:
            removed.append(True)
            cluster.cluster.remove_node(cluster.second)

    code, out, seen = _fit(
        tmp_path, cluster, 10, {"class_path": "rl_lightning.envs.CartPole"}, tick=remove_the_second_node_after_update_3
    )
    assert code == 0, out[-3000:]
    assert removed, out[-3000:]
    line = _one_replacement(out)
    assert ": its node left the cluster: " in line, line
    _assert_exact_budget(tmp_path, 10)
    _assert_no_process_left(seen, cluster, actors=3)
