"""Two processes as two nodes on this machine (``num_nodes 2``, ``devices 1``, DDP over gloo), each a CLI run.

This is the multi-node recipe of docs/guides/multi-gpu.md without a cluster manager: one ``rl-lightning fit`` per
node with ``NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` and ``WORLD_SIZE`` set, as Lightning's default environment
reads them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.warning_lines import warning_lines

# The heavy tier (two nodes' fits): not in the default run; CI runs it as a step of its own.
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[1]
NUM_ENVS, NUM_STEPS, UPDATES, NODES = 8, 8, 3, 2
PER_RANK_UPDATE = NUM_ENVS * NUM_STEPS  # env steps one rank collects per update
BUDGET = PER_RANK_UPDATE * NODES * UPDATES  # data.total_env_steps counts env steps over all ranks
# Variables another launcher may have left in the environment; any of them would change how Lightning sees the job.
LAUNCHER_VARS = ("LOCAL_RANK", "RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "PL_GLOBAL_SEED")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _node_env(node_rank: int, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("SLURM_")}
    env.update(
        PYTHONPATH=str(ROOT),
        OMP_NUM_THREADS="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        NODE_RANK=str(node_rank),
        WORLD_SIZE=str(NODES),
    )
    return env


def _launch_nodes(tmp_path: Path) -> list[subprocess.CompletedProcess]:
    fragment = tmp_path / "record.yaml"
    fragment.write_text(
        "trainer:\n  callbacks+:\n    - class_path: tests.rank_record.RankRecord\n"
        f"      init_args: {{out_dir: {tmp_path / 'ranks'}}}\n"
    )
    command = [
        sys.executable, "-m", "rl_lightning.cli", "fit", "--config", "ppo.yaml", "--config", str(fragment),
        "--trainer.num_nodes", str(NODES), "--trainer.devices", "1", "--trainer.strategy", "ddp",
        "--data.init_args.num_envs", str(NUM_ENVS), "--data.init_args.num_steps", str(NUM_STEPS),
        "--data.init_args.total_env_steps", str(BUDGET), "--model.init_args.update_epochs", "1",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip
    port = _free_port()
    nodes = [
        subprocess.Popen(command, cwd=tmp_path, env=_node_env(rank, port), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for rank in range(NODES)
    ]  # fmt: skip
    done = []
    try:
        for node in nodes:
            stdout, stderr = node.communicate(timeout=300)
            done.append(subprocess.CompletedProcess(node.args, node.returncode, stdout, stderr))
    finally:
        for node in nodes:  # a node whose peer died waits for it forever
            if node.poll() is None:
                node.kill()
                node.communicate()
    return done


def test_two_nodes_train_ppo_with_identical_weights_and_a_global_env_step_budget(tmp_path):
    done = _launch_nodes(tmp_path)
    for rank, node in enumerate(done):
        assert node.returncode == 0, f"node {rank}:\n{node.stderr[-3000:]}"
        assert warning_lines(node.stdout + node.stderr) == []  # no sync_dist advice, no Lightning notices
    ranks = [json.loads((tmp_path / "ranks" / f"rank{r}.json").read_text()) for r in range(NODES)]

    for rank, record in enumerate(ranks):
        assert (record["global_rank"], record["node_rank"]) == (rank, rank)  # one process per node
        assert (record["world_size"], record["num_nodes"]) == (NODES, NODES)
        assert record["updates"] == UPDATES
        assert record["rollout_size"] == PER_RANK_UPDATE
        assert record["local_env_steps"] == PER_RANK_UPDATE * UPDATES  # each rank collects its share...
        assert record["env_steps"] == BUDGET  # ...and env_steps (the budget's unit) counts all ranks
    assert ranks[0]["digests"] == ranks[1]["digests"]  # gradients all-reduced across nodes after every update
    assert len(set(ranks[0]["digests"])) == UPDATES  # and every update changed the weights
    assert ranks[0]["first_obs"] != ranks[1]["first_obs"]  # each node seeds its own envs

    (last,) = (tmp_path / "runs").rglob("last*.ckpt")  # written by rank 0 only
    checkpoint = torch.load(last, map_location="cpu", weights_only=False)
    assert checkpoint["policy_revision"]["digest"] == ranks[1]["digests"][-1]
    assert len(checkpoint["OnPolicyDataModule"]["collectors"]) == NODES  # every node's env streams, for resume
