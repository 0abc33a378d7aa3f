"""Self-play under DDP on 2 CPU processes: each rank owns its games and league draws; weights and league agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The heavy tier (two DDP ranks): not in the default run; CI runs it as a step of its own.
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[1]


def test_selfplay_ddp_two_cpu_processes(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "tests.selfplay_ddp_worker", str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    assert rank0["updates"] == rank1["updates"] == 3
    for index, (a, b) in enumerate(zip(rank0["rows"], rank1["rows"])):
        assert a["digest"] == b["digest"]  # gradients all-reduced: the same weights after every update
        assert a["league_versions"] == b["league_versions"] == list(range(index + 1))[-2:]
        assert a["league_digest"] == b["league_digest"]  # the same snapshots on both ranks
        assert a["ticks_obs"] != b["ticks_obs"]  # each rank plays its own games
        assert a["players"] != b["players"]  # and draws its own opponents ...
        assert a["league_stream"] != b["league_stream"]  # ... from its own seeded stream
        assert a["env_steps"] == b["env_steps"] == (index + 1) * 4 * 10 * 2
