"""Actors on a simulated two-node Ray cluster (``ray.cluster_utils.Cluster``, one CPU per node) and CLI runs on Ray:
a node removed mid-fit, SIGTERM then a resume on a cluster of another size, the bundled PPO and Hearts configs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning.child_processes import pid_alive
from tests.cli_subprocess import cli_environ, run_cli
from tests.helpers import tiny_ppo, trainer
from tests.test_actors_cli import ROLLOUT, _args, _descendants, _gone, _last_checkpoint, _start_and_mark

ray = pytest.importorskip("ray")

from rl_lightning.data.actors.ray_checks import init_ray  # noqa: E402 - needs Ray

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

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if pl_module.updates == self.updates and not self.before:
            self.before = trainer.datamodule.actors.where()
            self.cluster.remove_node(self.node)


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
