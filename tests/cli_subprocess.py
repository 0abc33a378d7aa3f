"""Run ``rl-lightning`` as a user does (its own process) and check what they see: exit code, stderr, files.

Each call is a separate OS process with its own pid, working directory, environment, signal handlers, exit code
and stdout/stderr. By default it is forked from a per-worker fork server that has already imported
``rl_lightning.cli`` (Python, torch and Lightning take ~4 s to import: most of a tiny CLI run), so a test pays the
import once per xdist worker instead of once per call. ``run_cli(..., fresh_interpreter=True)``, and any call whose
start-up variables differ from those the server started with (``TORCH_LOGS``, ``PYTHONPATH``: ``STARTUP_PREFIXES``),
execs ``python -m rl_lightning.cli`` instead; tests that check the first-run output of a fresh interpreter
(warnings printed at import) or that signal a run use ``subprocess`` directly.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests import cli_fork_server

ROOT = Path(__file__).resolve().parents[1]
ERROR_PREFIX = "rl-lightning: error:"
_SERVER: dict[str, cli_fork_server.Client] = {}
_SERVER_ENVIRON: dict[str, dict[str, str]] = {}


def cli_environ() -> dict[str, str]:
    """The environment a CLI run gets: the test process's, with this checkout first on ``PYTHONPATH``."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def run_cli(
    args: list[str], cwd: Path, timeout: float = 300, fresh_interpreter: bool = False
) -> subprocess.CompletedProcess[str]:
    """``python -m rl_lightning.cli ARGS`` in ``cwd`` with this checkout first on the path, as its own process."""
    return run_python(["-m", "rl_lightning.cli", *args], cwd, timeout, fresh_interpreter)


def run_python(
    argv: list[str],
    cwd: Path = ROOT,
    timeout: float = 300,
    fresh_interpreter: bool = False,
    extra_path: Sequence[Path] = (),
) -> subprocess.CompletedProcess[str]:
    """``python ARGV`` (``-m MODULE ...``, ``-c CODE ...`` or ``SCRIPT ...``) in ``cwd`` as its own process, with
    ``cli_environ()`` and ``extra_path`` first on ``PYTHONPATH``: forked from the fork server, or exec'd when asked or
    when the environment changed since the server started."""
    environ = cli_environ()
    startup = _startup_environ(environ)
    if extra_path:
        environ["PYTHONPATH"] = os.pathsep.join([*map(str, extra_path), environ["PYTHONPATH"]])
    command = [sys.executable, *argv]
    if fresh_interpreter or startup != _SERVER_ENVIRON.setdefault("environ", startup):
        return subprocess.run(
            command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout, check=False
        )
    with tempfile.TemporaryDirectory(prefix="rl_lightning_cli_") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        request = {"argv": list(argv), "cwd": str(cwd), "environ": environ, "extra_path": list(map(str, extra_path))}
        code = fork_server().run(request, str(out), str(err), timeout)
        return subprocess.CompletedProcess(command, code, _read(out), _read(err))


#: Variables an interpreter or the libraries the server imports (torch, Lightning, numpy's BLAS) read once at start-up.
#: A change in any other one (``PL_GLOBAL_SEED`` after an in-process ``seed_everything``, ``PYTEST_CURRENT_TEST``)
#: reaches the forked child through its ``os.environ``, which is replaced with the call's environment.
STARTUP_PREFIXES = ("PYTHON", "TORCH", "PYTORCH", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "CUDA", "NVIDIA_",
                    "LD_", "MALLOC_", "TRITON", "INDUCTOR", "LC_", "LANG")  # fmt: skip


def _startup_environ(environ: dict[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that a fresh interpreter would read at start-up (``STARTUP_PREFIXES``)."""
    return {key: value for key, value in environ.items() if key.startswith(STARTUP_PREFIXES)}


def fork_server() -> cli_fork_server.Client:
    """This test process's fork server, started on first use with the environment of the first call."""
    if "client" not in _SERVER:
        _SERVER["client"] = cli_fork_server.Client(_SERVER_ENVIRON["environ"])
    return _SERVER["client"]


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single ``rl-lightning: error:`` line of a failed run (asserting exit code, one line, no traceback)."""
    assert result.returncode != 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


def snapshot(*roots: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``roots`` with its mtime and sha256, to show a failed run changed and added nothing."""
    files = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                files[str(path)] = (path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return files
