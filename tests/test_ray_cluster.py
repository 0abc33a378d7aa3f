"""Actors on a simulated two-node Ray cluster (``ray.cluster_utils.Cluster``, one CPU per node) and CLI runs on Ray:
a node removed mid-fit, SIGTERM then a resume on a cluster of another size, the bundled PPO and Hearts configs."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning.errors import EnvError
from rl_lightning.processes.child_processes import pid_alive
from tests.cli_subprocess import ERROR_PREFIX, cli_environ, run_cli
from tests.helpers import tiny_ppo, trainer
from tests.test_actors import _deadline
from tests.test_actors_cli import ROLLOUT, _args, _descendants, _gone, _last_checkpoint, _start_and_mark

ray = pytest.importorskip("ray")

from rl_lightning.data.actors.ray_checks import init_ray  # noqa: E402 - needs Ray

# The heavy tier (Ray clusters of several nodes): not in the default run; CI runs it as a step of its own.
pytestmark = pytest.mark.heavy

ON_RAY = ["--data.init_args.actor_backend", "ray"]


@pytest.fixture
def two_nodes(monkeypatch):
    """A head node and a second node on this machine, one CPU each (no driver connected). Their workers import this
    checkout, as a real cluster's nodes have the package installed."""
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("PYTHONPATH", cli_environ()["PYTHONPATH"])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    second = cluster.add_node(num_cpus=1)
    try:
        yield cluster, second
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


class _RemoveNodeAfter(Callback):
    """Removes ``node`` from ``cluster`` once ``updates`` updates are done; notes where the actors ran before."""

    def __init__(self, cluster, node, updates: int) -> None:
        self.cluster, self.node, self.updates = cluster, node, updates
        self.before: list[tuple[str, int]] = []
        self.removed_at: float | None = None  # time.monotonic() when the node was removed

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if pl_module.updates == self.updates and not self.before:
            self.before = trainer.datamodule.actors.where()
            self.cluster.remove_node(self.node)
            self.removed_at = time.monotonic()


class _WhereAtEnd(Callback):
    def on_train_end(self, trainer, pl_module) -> None:
        self.where = trainer.datamodule.actors.where()


def test_a_node_removed_mid_fit_leaves_the_run_going_on_the_other(two_nodes, tmp_path):
    cluster, second = two_nodes
    init_ray(address=cluster.address, log_to_driver=False, logging_level="warning")
    module, datamodule = tiny_ppo(total_env_steps=10 * 64, update_epochs=1)
    datamodule.num_actors, datamodule.actor_backend = 1, "ray"
    remove, end = _RemoveNodeAfter(cluster, second, 3), _WhereAtEnd()
    trainer(tmp_path, callbacks=[remove, end]).fit(module, datamodule)
    head = ray.get_runtime_context().get_node_id()
    assert [node for node, _ in remove.before] == [second.node_id]  # the actor filled the other node first
    assert [node for node, _ in end.where] == [head]  # its replacement runs on the node that is left
    assert datamodule.local_env_steps == 10 * 64
    assert datamodule.last_rollout.stats["actors/restarts"] == 1.0


def test_a_node_lost_with_no_cpu_left_for_its_actor_is_said_at_once_and_stops_the_run_within_the_bound(
    two_nodes, tmp_path, capfd
):
    """Two nodes of one CPU, two actors: once the second node is gone its actor's replacement has nowhere to run.
    The run says so in one line at once and stops after ``actor_heartbeat_s`` (not after the 60 + 300 s that an
    actor which never answered is otherwise given, times ``actor_max_failures``)."""
    cluster, second = two_nodes
    init_ray(address=cluster.address, log_to_driver=False, logging_level="warning")
    module, datamodule = tiny_ppo(total_env_steps=100 * 64, update_epochs=1)
    datamodule.num_actors, datamodule.actor_backend, datamodule.actor_heartbeat_s = 2, "ray", 4.0
    remove = _RemoveNodeAfter(cluster, second, 2)
    with pytest.raises(EnvError) as info, _deadline(120):  # rather than ~15 minutes of silence
        trainer(tmp_path, callbacks=[remove]).fit(module, datamodule)
    assert remove.removed_at is not None
    waited = time.monotonic() - remove.removed_at  # from the node's removal: the start-up's seconds are not the bound's
    line = str(info.value)
    assert "\n" not in line
    assert "no CPU freed within 4 s to place it on" in line, line
    assert "live nodes have 1 CPU for 2 actors" in line, line
    assert "add a node" in line, line
    assert module.updates <= 3  # the node left after update 2; the rollout of update 3 may have been collected
    assert waited < 30  # the bound (4 s), plus the seconds Ray takes to see the node gone (4.4 s in all here)
    err = capfd.readouterr().err.splitlines()
    said = [row for row in err if "waits for a CPU" in row]
    assert len(said) == 1, said
    assert said[0].startswith("rl-lightning: actor "), said
    assert "was lost (its node left the cluster: ActorDiedError" in said[0], said
    assert "stops unless one frees within 4 s" in said[0], said
    assert not [row for row in err if "replaced with fresh seeds" in row]  # that one line says it all
    assert datamodule.actors is None  # closed: no actor left behind on the surviving node


@pytest.mark.slow  # ~35 s: a two-node cluster and a CLI fit
def test_the_ray_head_dying_under_the_learner_stops_the_run_with_one_line_and_a_checkpoint(two_nodes, tmp_path):
    """The learner runs on the head node (the raylet it is a driver of); SIGKILL that raylet mid-fit. Ray alone ends
    the fit with exit code 1, no message and no checkpoint; the run says what died and saves the last update."""
    cluster, _ = two_nodes
    address = ["--data.init_args.ray_address", cluster.address]
    proc, _ = _start_and_mark(tmp_path, 1000 * ROLLOUT, *ON_RAY, *address)
    raylet = cluster.head_node.all_processes["raylet"][0].process
    raylet.kill()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err[-3000:]
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, err[-3000:]
    assert f"the raylet of the Ray node this learner runs on (pid {raylet.pid}) died" in lines[0], lines[0]
    assert "checkpoint of update" in lines[0], lines[0]
    assert _last_checkpoint(tmp_path, 0)["rl_counters"]["updates"] >= 3


def _ray_processes(pids: list[int]) -> dict[int, str]:
    """The Ray processes among ``pids`` (its actors are ``ray::RayActor...``), with their command lines."""
    found = {}
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "ray" in command:
            found[pid] = command
    return found


def test_sigterm_kills_every_ray_process_and_a_resume_runs_on_a_cluster_of_another_size(tmp_path, two_nodes):
    proc, _ = _start_and_mark(tmp_path, 1000 * ROLLOUT, *ON_RAY)  # a local Ray instance of the run's own
    started = _ray_processes(_descendants(proc.pid))
    assert any("ray::RayActor" in command for command in started.values()), started
    assert any("raylet" in command for command in started.values()), started
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert _gone(list(started), within_s=20), {pid: c for pid, c in started.items() if pid_alive(pid)}
    saved = _last_checkpoint(tmp_path, 0)
    updates = saved["rl_counters"]["updates"]
    assert updates >= 3
    assert saved["OnPolicyDataModule"]["actor_generation"] == 1

    cluster, _ = two_nodes  # two actors now, one per node
    budget = (updates + 3) * ROLLOUT
    address = ["--data.init_args.ray_address", cluster.address, "--data.init_args.num_actors", "2"]
    result = run_cli([*_args(tmp_path, budget, *ON_RAY, *address), "--ckpt_path", "last"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = _last_checkpoint(tmp_path, 1)
    assert resumed["rl_counters"]["updates"] == updates + 3
    assert resumed["OnPolicyDataModule"]["local_env_steps"] == budget
    assert resumed["OnPolicyDataModule"]["actor_generation"] == 2  # the resumed actors drew fresh seeds
    # the cluster's raylets are this test process's children: no actor of the finished run is left on either node
    assert _gone([pid for pid, command in _ray_processes(_descendants(os.getpid())).items() if "RayActor" in command])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config", "extra"),
    [
        ("ppo.yaml", ["--data.init_args.num_envs", "4", "--data.init_args.num_steps", "16",
                      "--data.init_args.total_env_steps", "256", "--model.init_args.update_epochs", "2"]),
        ("ppo_hearts.yaml", ["--data.init_args.num_envs", "4", "--data.init_args.num_steps", "8",
                             "--data.init_args.total_env_steps", "64", "--model.init_args.hidden_sizes", "[32]",
                             "--model.init_args.update_epochs", "1", "--model.init_args.num_minibatches", "1"]),
    ],
    ids=["ppo", "ppo_hearts"],
)  # fmt: skip
def test_a_bundled_config_fits_with_its_actors_on_a_two_node_cluster(tmp_path, two_nodes, config, extra):
    if config == "ppo_hearts.yaml":
        pytest.importorskip("pyspiel")
    cluster, _ = two_nodes
    args = ["fit", "--config", config, *extra, *ON_RAY, "--data.init_args.num_actors", "2",
            "--data.init_args.ray_address", cluster.address, "--trainer.logger.init_args.save_dir",
            str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false"]  # fmt: skip
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (last,) = (tmp_path / "runs").rglob("last.ckpt")
    saved = torch.load(last, map_location="cpu", weights_only=False)
    total = int(extra[extra.index("--data.init_args.total_env_steps") + 1])
    assert saved["OnPolicyDataModule"]["local_env_steps"] == total
