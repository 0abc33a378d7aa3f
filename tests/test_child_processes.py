"""``child_environ``: the defaults a child process starts with fill in only what the user left unset.

The actor pool starts its fork server inside ``child_environ(OMP_NUM_THREADS="1", ...)``: one thread per actor by
default, but a user's ``OMP_NUM_THREADS=3`` must reach the actors as set and stay set in the learner afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rl_lightning.processes.child_processes import child_environ, forking_context, server_environ

ROOT = Path(__file__).resolve().parents[1]


def test_child_environ_keeps_what_the_user_set_and_restores_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("RL_LIGHTNING_TEST_DEFAULT", raising=False)
    with child_environ(OMP_NUM_THREADS="1", RL_LIGHTNING_TEST_DEFAULT="x"):
        assert os.environ["OMP_NUM_THREADS"] == "3"  # the user's value, not the default
        assert os.environ["RL_LIGHTNING_TEST_DEFAULT"] == "x"  # unset: the default, while the child starts
    assert os.environ["OMP_NUM_THREADS"] == "3"  # still the user's afterwards
    assert "RL_LIGHTNING_TEST_DEFAULT" not in os.environ


def write_omp_num_threads(path: str) -> None:
    """In the child: what it was started with."""
    Path(path).write_text(os.environ.get("OMP_NUM_THREADS", "unset"))


def start_child_as_the_pool_does(path: str) -> None:
    """A child of this package's fork server, started as ``ActorPool`` starts its actors."""
    with child_environ(OMP_NUM_THREADS="1", **server_environ()):
        child = forking_context([]).Process(target=write_omp_num_threads, args=(path,))
        child.start()
    child.join(60)


@pytest.mark.parametrize(("user", "seen"), [("3", "3"), (None, "1")], ids=["user-set", "unset"])
def test_a_child_starts_with_the_users_value_or_the_default(tmp_path: Path, user: str | None, seen: str) -> None:
    environ = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), environ.get("PYTHONPATH", "")])
    if user is not None:
        environ["OMP_NUM_THREADS"] = user
    out = tmp_path / "omp"
    code = f"from tests.test_child_processes import start_child_as_the_pool_does as start; start({str(out)!r})"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.read_text() == seen
