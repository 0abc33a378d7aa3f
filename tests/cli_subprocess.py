"""Run ``rl-lightning`` as a user does (a subprocess) and check what they see: exit code, stderr, files."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ERROR_PREFIX = "rl-lightning: error:"


def run_cli(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m rl_lightning.cli ARGS`` in ``cwd`` with this checkout first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "rl_lightning.cli", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


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
