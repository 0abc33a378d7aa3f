"""Ray's token authentication (on by default in Ray 2.60) with real ``ray start`` clusters: the Ray guide's cluster
recipe as written, and a run that a cluster refuses for its token told so in one line, at once."""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.cli_subprocess import ERROR_PREFIX, run_cli

# The heavy tier (a Ray instance per test): not in the default run; CI runs it as a step of its own.
pytestmark = pytest.mark.heavy

ray = pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))
GUIDE = ROOT / "docs" / "guides" / "ray.md"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def _node_ip() -> str:
    from ray.util import get_node_ip_address

    return get_node_ip_address()


class _Node:
    """``ray start ... --block`` as a child process: stopping it (SIGTERM) stops every process of that node."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, port: int | None = None) -> None:
        self.log = log
        self.proc = subprocess.Popen(argv, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while "Ray runtime started" not in log.read_text():
            assert self.proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        if port is not None:
            socket.create_connection(("127.0.0.1", port), timeout=10).close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _environ(home: Path, **extra: str) -> dict[str, str]:
    """The test's environment for a node or a run on its own "machine" (``HOME``: where Ray keeps its token)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra)
    return env


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory: Ray's unix sockets live under a head's ``--temp-dir`` (at most 107 bytes a path)."""
    with tempfile.TemporaryDirectory(prefix="rt", dir="/tmp") as path:
        yield Path(path)


@pytest.fixture(scope="module")
def token_head() -> Iterator[tuple[str, str]]:
    """A one-CPU head with token authentication and a token of its own; ``(address, token)``."""
    token, port = secrets.token_hex(16), _free_port()
    with tempfile.TemporaryDirectory(prefix="rt", dir="/tmp") as path:
        home = Path(path)
        env = _environ(home, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
        argv = [RAY, "start", "--head", "--block", "--port", str(port), "--num-cpus", "1", "--include-dashboard",
                "false", "--disable-usage-stats", "--temp-dir", str(home / "ray")]  # fmt: skip
        head = _Node(argv, env, home / "head.log", port)
        try:
            yield f"{_node_ip()}:{port}", token
        finally:
            head.stop()


def _fit_args(tmp_path: Path, address: str, total: int = 256, actors: int = 1) -> list[str]:
    return [
        "fit", "--config", "ppo",
        "--data.init_args.num_envs", "4", "--data.init_args.num_steps", "16",
        "--data.init_args.total_env_steps", str(total), "--data.init_args.num_actors", str(actors),
        "--data.init_args.actor_backend", "ray", "--data.init_args.ray_address", address,
        "--model.init_args.hidden_sizes", "[16]", "--model.init_args.update_epochs", "1",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("learner", "expected"),
    [
        ({}, "token authentication on (Ray's default) and this run sent none (RAY_AUTH_MODE is unset)"),
        ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 32}, "refused the token this run sent"),
    ],
    ids=["no-token", "wrong-token"],
)
def test_a_cluster_that_refuses_the_runs_token_is_named_in_one_line_at_once(
    token_head, tmp_path, monkeypatch, learner, expected
):
    address, _ = token_head
    for name in [name for name in os.environ if name.startswith("RAY_")]:
        monkeypatch.delenv(name)  # a local Ray instance earlier in this process sets RAY_AUTH_MODE=token
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token
    for name, value in learner.items():
        monkeypatch.setenv(name, value)
    started = time.monotonic()
    result = run_cli(_fit_args(tmp_path, address), tmp_path)
    took = time.monotonic() - started
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, result.stderr[-3000:]
    assert f"data.ray_address={address!r}: the Ray cluster there refused this run" in lines[0], lines[0]
    assert expected in lines[0], lines[0]
    assert "RAY_AUTH_MODE=token and the cluster's token" in lines[0], lines[0]
    assert "no Ray cluster found" not in result.stderr
    assert "InvalidAuthToken" not in result.stderr  # Ray's retries printed one warning a second for 20 s
    assert took < 20, took
    assert not list(tmp_path.rglob("*.ckpt"))


def _recipe() -> list[str]:
    """The lines of the guide's cluster recipe: its first ``bash`` block after "Pointing a run at a cluster"."""
    text = GUIDE.read_text()
    section = text[text.index("## Pointing a run at a cluster") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


@pytest.mark.slow  # ~40 s: two `ray start` nodes and a fit with an actor on each
def test_the_guides_cluster_recipe_works_as_written(short_tmp, tmp_path, monkeypatch):
    port, ip = _free_port(), _node_ip()
    head_home, node_home = short_tmp / "head", short_tmp / "node"
    head_home.mkdir()
    node_home.mkdir()
    lines = _recipe()
    assert lines == [
        "# on the head; the learner runs here",
        "export RAY_AUTH_MODE=token",
        "ray get-auth-token --generate",
        "ray start --head --port 6379 --num-cpus 4",
        "# on each other node, with the token the head printed",
        "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=THE_HEAD_TOKEN",
        "ray start --address HEAD_IP:6379 --num-cpus 8",
    ]  # the commands below are these, on one machine: one CPU a node, --block to stop them, a temp dir of its own
    head_env = _environ(head_home, RAY_AUTH_MODE="token")
    printed = subprocess.run([RAY, "get-auth-token", "--generate"], env=head_env, capture_output=True, text=True)
    token = printed.stdout.strip()
    assert printed.returncode == 0, printed.stderr
    assert len(token) >= 32, printed.stdout
    assert (head_home / ".ray" / "auth_token").read_text().strip() == token
    nodes = []
    try:
        argv = [RAY, "start", "--head", "--port", str(port), "--num-cpus", "1", "--block", "--include-dashboard",
                "false", "--disable-usage-stats", "--temp-dir", str(short_tmp / "ray")]  # fmt: skip
        nodes.append(_Node(argv, head_env, short_tmp / "head.log", port))
        node_env = _environ(node_home, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
        argv = [RAY, "start", "--address", f"{ip}:{port}", "--num-cpus", "1", "--block", "--disable-usage-stats"]
        nodes.append(_Node(argv, node_env, short_tmp / "node.log"))
        # the learner, on the head with RAY_AUTH_MODE=token: one actor on each node
        for name in [name for name in os.environ if name.startswith("RAY_")]:
            monkeypatch.delenv(name)
        monkeypatch.setenv("HOME", str(head_home))
        monkeypatch.setenv("RAY_AUTH_MODE", "token")
        result = run_cli(_fit_args(tmp_path, f"{ip}:{port}", total=6 * 64, actors=2), tmp_path)
    finally:
        for node in reversed(nodes):
            node.stop()
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Token authentication is enabled" not in result.stderr  # the notice the run drops (the guide explains)
    (last,) = (tmp_path / "runs").rglob("last.ckpt")
    assert torch.load(last, map_location="cpu", weights_only=False)["OnPolicyDataModule"]["local_env_steps"] == 6 * 64
