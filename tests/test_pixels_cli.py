"""Pixels through the ``rl-lightning`` CLI in a subprocess: a ``Dict`` image + vector env fits with PPO (a shared
Nature CNN), SPO (separate IMPALA trunks) and DreamerV3 (its CNN and MLP keys); each checkpoint acts in a fresh
process (SPO's saved replay keeps ``uint8`` pixels); bad encoder choices are one-line errors that write nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_subprocess import run_python
from tests.test_env_gymnasium_cli import TINY_PPO, assert_one_line_error, run_cli
from tests.test_spaces_cli import TINY_DREAMER, TINY_SPO, env

#: Run in a fresh interpreter: load the checkpoint, check the CNN came back, act on the env's own observations.
LOAD = """
import json, sys, torch
from rl_lightning import algos, keys
from rl_lightning.envs import BatchedEnv, ClassSpec, GymnasiumEnv
path, name, env_args = sys.argv[1:]
model = getattr(algos, name).load_from_checkpoint(path, map_location="cpu")
saved = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
assert set(saved) == set(model.state_dict())
for key, value in model.state_dict().items():
    assert torch.equal(value, saved[key]), key
if name == "DreamerV3":  # its own CNN for the image key, an MLP beside it for the vector key
    wm = model.world_model
    cnn, shared = wm.encoder, wm.vector_encoder is None
else:
    cnn, shared = model.encoder.encoders[0], model.critic_encoder is None
env = BatchedEnv(GymnasiumEnv(env_class=ClassSpec("tests.space_envs.Pixels", json.loads(env_args))), 3)
obs = env.reset()
assert obs[keys.OBS, "pixels"].dtype == torch.uint8
action = model.act(obs, torch.Generator(), deterministic=True)[keys.ACTION]
env.step(action)
print("ACTED", type(cnn).__name__, tuple(action.shape), shared)
for rank in torch.load(path, map_location="cpu", weights_only=False).get("ReplayDataModule", {}).get("replay", []):
    stored = rank["ring"]["storage"]["obs"]
    print("REPLAY", stored["pixels"].dtype, tuple(stored["pixels"].shape[2:]), stored["state"].dtype)
"""


def with_model(tiny: dict, **model: object) -> dict:
    return {**tiny, "model": {"init_args": {**tiny["model"]["init_args"], **model}}}


RUNS = {
    "ppo": ("ppo.yaml", with_model(TINY_PPO, encoder={"pixels": "nature"}, hidden_sizes=[]), "PPO", {"layout": "chw"},
            "PixelEncoder (3,) True"),
    "spo": ("spo.yaml", with_model(TINY_SPO, encoder="impala", share_encoder=False), "SPO", {"layout": "hwc"},
            "PixelEncoder (3,) False"),
    "dreamer": ("dreamer.yaml", TINY_DREAMER, "DreamerV3", {"layout": "hwc", "size": 16}, "CNNEncoder (3,) False"),
}  # fmt: skip


@pytest.mark.parametrize("algo", list(RUNS))
def test_image_and_vector_dict_fits_and_the_checkpoint_acts_in_a_fresh_process(tmp_path: Path, algo: str) -> None:
    base, tiny, name, env_args, acted = RUNS[algo]
    if algo == "spo":
        tiny = {**tiny, "data": {"init_args": {**tiny["data"]["init_args"], "save_replay": True}}}
    done = run_cli(tmp_path, env("Pixels", **env_args), base=base, tiny=tiny)
    assert done.returncode == 0, done.stderr[-3000:]
    (ckpt,) = (tmp_path / "runs").rglob("last.ckpt")
    loaded = run_python(["-c", LOAD, str(ckpt), name, json.dumps(env_args)])
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert f"ACTED {acted}" in loaded.stdout
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
    base, tiny, *_ = RUNS[algo]
    done = run_cli(tmp_path, env_config, base=base, tiny=with_model(tiny, **model))
    assert_one_line_error(done, *fragments)
    assert not (tmp_path / "runs").exists()
