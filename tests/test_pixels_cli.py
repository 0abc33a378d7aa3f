"""Pixels through the ``rl-lightning`` CLI in a subprocess: a ``Dict`` image + vector env fits with PPO (a shared
Nature CNN) and SPO (separate IMPALA trunks), the checkpoints act in a fresh process (and SPO's saved replay keeps
``uint8`` pixels), and bad encoder choices are one-line errors that write nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_env_gymnasium_cli import ROOT, TINY_PPO, assert_one_line_error, run_cli
from tests.test_spaces_cli import TINY_SPO, env

#: Run in a fresh interpreter: load the checkpoint, check the CNN came back, act on the env's own observations.
LOAD = """
import sys, torch
from rl_lightning import algos, keys
from rl_lightning.envs import BatchedEnv, ClassSpec, GymnasiumEnv
from rl_lightning.networks.cnn import PixelEncoder
path, name, layout = sys.argv[1:]
model = getattr(algos, name).load_from_checkpoint(path, map_location="cpu")
saved = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
for key, value in model.state_dict().items():
    assert torch.equal(value, saved[key]), key
cnn = model.encoder.encoders[0]
assert isinstance(cnn, PixelEncoder), type(cnn)
env = BatchedEnv(GymnasiumEnv(env_class=ClassSpec("tests.space_envs.Pixels", {"layout": layout})), 3)
obs = env.reset()
assert obs[keys.OBS, "pixels"].dtype == torch.uint8
action = model.act(obs, torch.Generator(), deterministic=True)[keys.ACTION]
env.step(action)
print("ACTED", type(cnn.trunk[0]).__name__, tuple(action.shape), model.critic_encoder is None)
for rank in torch.load(path, map_location="cpu", weights_only=False).get("ReplayDataModule", {}).get("replay", []):
    stored = rank["ring"]["storage"]["obs"]
    print("REPLAY", stored["pixels"].dtype, tuple(stored["pixels"].shape[2:]), stored["state"].dtype)
"""


def with_model(tiny: dict, **model: object) -> dict:
    return {**tiny, "model": {"init_args": {**tiny["model"]["init_args"], **model}}}


RUNS = {
    "ppo": ("ppo.yaml", with_model(TINY_PPO, encoder="nature", hidden_sizes=[]), "PPO", "chw", "True"),
    "spo": ("spo.yaml", with_model(TINY_SPO, encoder="impala", share_encoder=False), "SPO", "hwc", "False"),
}


@pytest.mark.parametrize("algo", list(RUNS))
def test_image_and_vector_dict_fits_and_the_checkpoint_acts_in_a_fresh_process(tmp_path: Path, algo: str) -> None:
    base, tiny, name, layout, shared = RUNS[algo]
    if algo == "spo":
        tiny = {**tiny, "data": {"init_args": {**tiny["data"]["init_args"], "save_replay": True}}}
    done = run_cli(tmp_path, env("Pixels", layout=layout), base=base, tiny=tiny)
    assert done.returncode == 0, done.stderr[-3000:]
    (ckpt,) = (tmp_path / "runs").rglob("last.ckpt")
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD, str(ckpt), name, layout], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert f"ACTED Conv2d (3,) {shared}" in loaded.stdout
    if algo == "spo":
        assert "REPLAY torch.uint8 (36, 36, 3) torch.float32" in loaded.stdout


REFUSALS = {
    "too_small": (
        env("Pixels", size=20),
        {"encoder": "nature"},
        ("model.encoder", "observation key 'pixels' (uint8 (3, 20, 20))", "too small for the nature CNN",
         "encoders that fit: impala, mlp"),
    ),
    "not_an_image": (
        env("Pixels"),
        {"encoder": {"state": "impala"}},
        ("observation key 'state' (float32 (4,)) is not an image", "give it mlp"),
    ),
}  # fmt: skip


@pytest.mark.parametrize(("algo", "case"), [("ppo", "too_small"), ("spo", "not_an_image")])
def test_bad_encoder_choice_is_one_line_and_writes_nothing(tmp_path: Path, algo: str, case: str) -> None:
    env_config, model, fragments = REFUSALS[case]
    base, tiny, _, _, _ = RUNS[algo]
    done = run_cli(tmp_path, env_config, base=base, tiny=with_model(tiny, **model))
    assert_one_line_error(done, *fragments)
    assert not (tmp_path / "runs").exists()
