"""``rl-lightning export`` as a user runs it (a subprocess): success, each bad input as one line that writes
nothing, refusals of what cannot be exported, and the Hearts bot played by ``onnxruntime`` alone."""

from __future__ import annotations

import json
import os
import random
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from rl_lightning import load_policy
from rl_lightning.errors import ConfigError
from rl_lightning.export import policy_graph
from rl_lightning.export.writers import write
from tests.cli_subprocess import error_line, run_cli, snapshot
from tests.test_export import fit_checkpoint

pytest.importorskip("onnxruntime", reason='needs pip install -e ".[export]"')
pytest.importorskip("onnxscript", reason='needs pip install -e ".[export]"')

HANDS = 100


@pytest.fixture(scope="module")
def cartpole_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fit_checkpoint(tmp_path_factory.mktemp("cartpole"), "ppo_cartpole")


def test_export_writes_a_file_and_says_what_it_takes(cartpole_ckpt, tmp_path):
    out = tmp_path / "policy.onnx"
    result = run_cli(["export", "--ckpt_path", str(cartpole_ckpt), "--format", "onnx", "--out", str(out)], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"wrote {out} (onnx); inputs: obs float32[B,4]; outputs: action, logits" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.onnx"]  # no temporary file left beside it
    assert _mode(out) == _mode(cartpole_ckpt)  # readable as the checkpoint is (mkstemp made it -rw-------)
    # A quiet command: nothing but what it wrote (the exporter logged "torchvision is not installed" four times).
    assert result.stderr == "", result.stderr


BAD = [
    pytest.param(["--ckpt_path", "missing.ckpt", "--format", "onnx"], "--ckpt_path='missing.ckpt': no such file",
                 id="missing-ckpt"),
    pytest.param(["--ckpt_path", "{ckpt}", "--format", "tflite"], "--format='tflite' is not an export format; "
                 "choose one of ['onnx', 'torch_export']", id="unknown-format"),
    pytest.param(["--ckpt_path", "{ckpt}", "--format", "onnx", "--out", "no/such/dir/p.onnx"],
                 "directory 'no/such/dir' does not exist", id="out-dir-missing"),
    pytest.param(["--ckpt_path", "{ckpt}", "--format", "onnx", "--out", "."], "--out='.' is a directory",
                 id="out-is-a-directory"),
]  # fmt: skip
# The same path in-process (each subprocess pays the CLI's imports: seconds).
BAD_IN_PROCESS = [
    pytest.param(["--ckpt_path", "notes.txt", "--format", "onnx"], "notes.txt", id="not-a-checkpoint"),
    pytest.param(["--format", "onnx"], "the following arguments are required: --ckpt_path", id="no-ckpt-flag"),
    pytest.param(["--ckpt_path", "{ckpt}", "--format", "onnx", "--mask_dtype", "int8"],
                 "--mask_dtype='int8' is not a mask dtype", id="bad-mask-dtype"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "expected"), BAD)
def test_bad_export_input_is_one_line_and_writes_nothing(cartpole_ckpt, tmp_path, args, expected):
    (tmp_path / "notes.txt").write_text("a file the failed export must leave alone\n")
    before = snapshot(tmp_path, cartpole_ckpt.parent)
    result = run_cli(["export", *(a.replace("{ckpt}", str(cartpole_ckpt)) for a in args)], tmp_path)
    line = error_line(result)
    assert result.returncode == 2
    assert expected in line
    assert snapshot(tmp_path, cartpole_ckpt.parent) == before


@pytest.mark.parametrize(("args", "expected"), BAD_IN_PROCESS)
def test_bad_export_input_in_process(cartpole_ckpt, tmp_path, monkeypatch, args, expected):
    from rl_lightning.export.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("not a checkpoint\n")
    before = snapshot(tmp_path, cartpole_ckpt.parent)
    with pytest.raises(ConfigError, match=re.escape(expected)):
        main([a.replace("{ckpt}", str(cartpole_ckpt)) for a in args])
    assert snapshot(tmp_path, cartpole_ckpt.parent) == before


def test_unexportable_policy_is_refused_in_one_line(tmp_path):
    ckpt = fit_checkpoint(tmp_path, "ppo_multidiscrete")
    before = snapshot(tmp_path)
    line = error_line(run_cli(["export", "--ckpt_path", str(ckpt), "--format", "onnx", "--stochastic"], tmp_path))
    assert "--stochastic: PPO samples multi_discrete actions without a noise input" in line
    assert snapshot(tmp_path) == before


class _Zeta(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.zeta(x.abs() + 2.0, torch.ones_like(x))


def test_an_operator_onnx_lacks_is_named_and_nothing_is_written(cartpole_ckpt, tmp_path):
    graph = policy_graph(load_policy(str(cartpole_ckpt)))
    graph.actor = nn.Sequential(graph.actor, _Zeta())  # a network with an op ONNX has no translation for
    with pytest.raises(ConfigError, match=r"ONNX cannot express PPOGraph: operator \S*zeta\S* has no translation"):
        write(graph, "onnx", tmp_path / "p.onnx")
    assert list(tmp_path.iterdir()) == []
    write(graph, "torch_export", tmp_path / "p.pt2")  # torch.export itself has the op
    assert [p.name for p in tmp_path.iterdir()] == ["p.pt2"]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["022", "027"])
def test_exported_files_honour_the_umask(cartpole_ckpt, tmp_path, umask):
    """The writer renames a ``mkstemp`` file into place, and ``mkstemp`` creates it ``-rw-------`` whatever the umask:
    a service running as another user could read the checkpoint but not the file exported from it."""
    graph = policy_graph(load_policy(str(cartpole_ckpt)))
    old = os.umask(umask)
    try:
        write(graph, "torch_export", tmp_path / "p.pt2")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "p.pt2") == 0o666 & ~umask


def test_a_write_that_fails_midway_leaves_nothing(cartpole_ckpt, tmp_path, monkeypatch):
    import rl_lightning.export.writers as writers

    def half_write(graph, path):
        path.write_bytes(b"half a file")
        raise ConfigError("export: the disk filled up")

    monkeypatch.setattr(writers, "_write_program", half_write)
    (tmp_path / "p.pt2").write_bytes(b"an earlier export")
    with pytest.raises(ConfigError, match="disk filled up"):
        writers.write(policy_graph(load_policy(str(cartpole_ckpt))), "torch_export", tmp_path / "p.pt2")
    assert [p.name for p in tmp_path.iterdir()] == ["p.pt2"]
    assert (tmp_path / "p.pt2").read_bytes() == b"an earlier export"  # the earlier file is not clobbered


# ----- Hearts: the bot a game engine runs ----------------------------------------------------------------------------

ENGINE = """
import json, sys
import numpy as np
import onnxruntime as ort
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
obs_name, mask_name = [i.name for i in session.get_inputs()]
data = np.load(sys.argv[2])
actions = []
for obs, mask in zip(data["obs"], data["mask"]):  # one decision at a time, as the engine asks
    action, _ = session.run(None, {obs_name: obs[None], mask_name: mask[None]})
    actions.append(int(action[0]))
banned = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "rl_lightning", "pyspiel", "tensordict"))
print(json.dumps({"inputs": [obs_name, mask_name], "actions": actions, "banned": banned}))
"""


def _play_hands(policy, hands: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``hands`` Hearts hands through pyspiel, played side by side, every seat by ``policy`` (one batched call per
    tick); every decision's ``information_state_tensor``, ``legal_actions_mask`` and action."""
    import pyspiel

    game, rng = pyspiel.load_game("hearts"), random.Random(seed)
    states = [game.new_initial_state() for _ in range(hands)]
    observations, masks, actions = [], [], []
    while True:
        for state in states:
            while state.is_chance_node():
                outcomes, probs = zip(*state.chance_outcomes(), strict=True)
                state.apply_action(rng.choices(outcomes, probs)[0])
        deciding = [state for state in states if not state.is_terminal()]
        if not deciding:
            return np.concatenate(observations), np.concatenate(masks), actions
        obs = np.stack([np.asarray(s.information_state_tensor(s.current_player()), np.float32) for s in deciding])
        mask = np.stack([np.asarray(s.legal_actions_mask(s.current_player()), bool) for s in deciding])
        chosen = [int(a) for a in policy(obs, mask)]
        for state, action in zip(deciding, chosen, strict=True):
            state.apply_action(action)
        observations.append(obs), masks.append(mask), actions.extend(chosen)


def test_hearts_bot_plays_recorded_hands_in_onnxruntime_alone(tmp_path):
    pytest.importorskip("pyspiel", reason='needs pip install -e ".[games]"')
    tiny = ["--data.init_args.num_envs", "4", "--data.init_args.num_steps", "40", "--data.init_args.total_env_steps",
            "320", "--model.init_args.update_epochs", "1", "--model.init_args.num_minibatches", "2",
            "--model.init_args.hidden_sizes", "[32]", "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
            "--trainer.enable_progress_bar", "false"]  # fmt: skip
    fit = run_cli(["fit", "--config", "ppo_hearts.yaml", *tiny], tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    (ckpt,) = (tmp_path / "runs" / "ppo_hearts").glob("version_*/checkpoints/last.ckpt")
    out = tmp_path / "hearts.onnx"
    exported = run_cli(["export", "--ckpt_path", str(ckpt), "--format", "onnx", "--out", str(out)], tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    obs, masks, want = _play_hands(load_policy(str(ckpt), deterministic=True), HANDS, seed=7)
    assert obs.shape[1] == 5088
    assert len(want) >= HANDS * 52  # 13 tricks x 4 seats per hand, plus the passes
    np.savez(tmp_path / "hands.npz", obs=obs, mask=masks)
    (tmp_path / "engine.py").write_text(ENGINE)
    engine = subprocess.run([sys.executable, "engine.py", str(out), "hands.npz"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, check=False)  # fmt: skip
    assert engine.returncode == 0, engine.stderr[-3000:]
    played = json.loads(engine.stdout)
    assert played["inputs"] == ["obs", "action_mask"]
    assert played["banned"] == []
    assert played["actions"] == want
    assert len(set(want)) > 13  # many different cards played: a real match, not one constant
