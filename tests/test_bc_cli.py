"""Behaviour cloning as a user runs it (subprocesses): record -> fit BC -> fit PPO from its weights; bad input."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.lineage import REVISION_KEY
from tests.cli_subprocess import error_line, run_cli, snapshot

pytest.importorskip("pyspiel", reason='needs pip install -e ".[games]"')

BOT = "rl_lightning.envs.games.bots.HeartsHeuristic"
QUIET = ["--trainer.enable_progress_bar", "false"]


def test_record_then_fit_bc_then_fit_ppo_from_its_weights(tmp_path):
    record = ["record", "--config", "ppo_hearts.yaml", "--bot", BOT, "--games", "8", "--out", "rec"]
    recorded = run_cli(record, tmp_path)
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    assert (tmp_path / "rec" / "meta.json").is_file()
    runs = str(tmp_path / "runs")
    bc = run_cli(["fit", "--config", "bc_hearts.yaml", "--data.init_args.path", "rec", "--trainer.max_epochs", "2",
                  "--model.init_args.hidden_sizes", "[32]", "--trainer.logger.init_args.save_dir", runs, *QUIET],
                 tmp_path)  # fmt: skip
    assert bc.returncode == 0, bc.stderr[-3000:]
    run = next((tmp_path / "runs" / "bc_hearts").iterdir())
    events = b"".join(path.read_bytes() for path in run.glob("events.out.tfevents.*"))
    for tag in (b"train/loss_bc", b"train/accuracy", b"val/accuracy"):
        assert tag in events
    bc_ckpt = run / "checkpoints" / "last.ckpt"
    ppo = run_cli(["fit", "--config", "ppo_hearts.yaml", "--model.init_args.init_weights", str(bc_ckpt),
                   "--model.init_args.hidden_sizes", "[32]", "--data.init_args.num_envs", "8",
                   "--data.init_args.num_steps", "40", "--data.init_args.total_env_steps", "640",
                   "--model.init_args.update_epochs", "1", "--model.init_args.num_minibatches", "2",
                   "--trainer.logger.init_args.save_dir", runs, *QUIET], tmp_path)  # fmt: skip
    assert ppo.returncode == 0, ppo.stderr[-3000:]
    saved = torch.load(next((tmp_path / "runs" / "ppo_hearts").iterdir()) / "checkpoints" / "last.ckpt",
                       weights_only=False)  # fmt: skip
    parent = torch.load(bc_ckpt, weights_only=False)
    assert saved[REVISION_KEY]["parent_digest"] == parent[REVISION_KEY]["digest"]
    assert saved[REVISION_KEY]["parent"] == -1  # not a resume
    assert saved["rl_counters"]["updates"] == 2  # 640 steps of 320: this run's updates only, not BC's
    assert saved["rl_counters"]["updates"] < parent["rl_counters"]["updates"]


BAD = [
    pytest.param(["record", "--config", "ppo_hearts.yaml", "--bot", "my_pkg.bots:Nope", "--games", "2", "--out", "o"],
                 "--bot='my_pkg.bots:Nope' does not import", id="bot-does-not-import"),  # fmt: skip
    pytest.param(["record", "--config", "ppo_hearts.yaml", "--bot", BOT, "--games", "0", "--out", "o"],
                 "--games 0: record at least one game", id="no-games"),  # fmt: skip
    pytest.param(["record", "--config", "ppo_hearts.yaml", "--bot", BOT, "--games", "2", "--out", "notes.txt"],
                 "--out 'notes.txt' exists already", id="out-exists"),  # fmt: skip
    pytest.param(["fit", "--config", "bc_hearts.yaml", "--data.init_args.path", "missing", "--data.init_args.bot",
                  "null"], "data.path='missing': no such records", id="bc-no-records"),  # fmt: skip
    pytest.param(["fit", "--config", "ppo_hearts.yaml", "--model.init_args.init_weights", "nope.ckpt"],
                 "model.init_weights='nope.ckpt': no such file", id="init-weights-missing"),  # fmt: skip
]


@pytest.mark.parametrize(("args", "expected"), BAD)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, expected):
    (tmp_path / "notes.txt").write_text("a file the failed run must leave alone\n")
    before = snapshot(tmp_path)
    line = error_line(run_cli([*args, "--trainer.logger.init_args.save_dir", "runs"] if args[0] == "fit" else args,
                              tmp_path))  # fmt: skip
    assert expected in line
    assert snapshot(tmp_path) == before
