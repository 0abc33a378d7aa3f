"""DDP on 2 CPU processes (gloo): per-rank env seeds, identical weights after every update, global env steps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.cli_subprocess import run_python

# The heavy tier (two DDP ranks per test): not in the default run; CI runs it as a step of its own.
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "algo",
    [
        "ppo",
        pytest.param("ppo_norm", marks=pytest.mark.slow),  # pooled stats over gloo ranks: test_normalizers
        "ppo_actors",
        "ppo_actors_kill",  # rank 0's actor SIGKILLed after update 1: both ranks count the same env steps, 3 updates
        pytest.param("recurrent_ppo", marks=pytest.mark.slow),  # ~11 s each; the default run keeps one per datamodule
        "spo",
        "dreamer",
        pytest.param("dreamer_f64", marks=pytest.mark.slow),
        pytest.param("dreamer_compiled", marks=pytest.mark.slow),
    ],  # 20 s; compiled regions: test_dreamer_compile
)
def test_ddp_two_cpu_processes(tmp_path, algo):
    if algo == "dreamer_f64":
        pytest.importorskip("mujoco")
    done = run_python(["-m", "tests.ddp_worker", str(tmp_path), algo], cwd=ROOT, timeout=300)  # rank 0, forked
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sync_dist" not in done.stderr  # Lightning's advice for per-rank epoch-level logs: ours are global
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    assert rank0["updates"] == rank1["updates"] == 3
    for a, b in zip(rank0["rows"], rank1["rows"]):
        assert a["digest"] == b["digest"]  # gradients all-reduced: weights identical after every update
        assert a["first_obs"] != b["first_obs"]  # ranks seed their envs differently
        both_nan = math.isnan(a["episode_return"]) and math.isnan(b["episode_return"])
        assert both_nan or a["episode_return"] == b["episode_return"]  # global (synced); NaN: none finished
        assert a["train"] == b["train"]  # logged train/* are means over ranks: the global batch's losses...
        assert not a["own_train"] or a["own_train"] != b["own_train"]  # ...each rank's own differ (own rollout)
    assert any(row["train"] for row in rank0["rows"])
    expected_dtype = "torch.float64" if algo == "dreamer_f64" else "torch.float32"
    for row in rank0["rows"] + rank1["rows"]:
        assert row["obs_dtype"] == expected_dtype  # the env's dtype, on every rank (not cast at the adapter)
        assert row["stored_obs_dtype"] in (None, expected_dtype)  # and in the replay ring
    if algo.startswith("dreamer"):
        assert all(row["stored_obs_dtype"] == expected_dtype for row in rank0["rows"] + rank1["rows"])
    per_update = 16 if algo.startswith("dreamer") else 128
    for rank in (rank0, rank1):  # global env steps, the same on both ranks
        assert [r["env_steps"] for r in rank["rows"]] == [per_update, 2 * per_update, 3 * per_update]
    if algo == "ppo_actors_kill":
        assert "rl-lightning: actor 0 on rank 0 replaced" in done.stderr, done.stderr[-3000:]


def test_the_cli_closes_the_process_group_after_a_run(monkeypatch, tmp_path):
    """A gloo group alive at interpreter exit sometimes aborts a finished rank (SIGABRT): ``main`` destroys it."""
    import torch.distributed as dist

    from rl_lightning import cli

    def fit_that_leaves_a_group(args, **_):
        store = dist.FileStore(str(tmp_path / "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)

    monkeypatch.setattr(cli, "cli_main", fit_that_leaves_a_group)
    cli.main([])
    assert not dist.is_initialized()
