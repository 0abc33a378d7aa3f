"""Spaces through the ``rl-lightning`` CLI in a subprocess: Dict observations for PPO, SPO and DreamerV3 (with the
checkpoint loaded in a fresh process), and the one-line refusals of spaces or backends an algorithm cannot take."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_subprocess import run_python
from tests.test_env_gymnasium_cli import TINY_PPO, assert_one_line_error, run_cli

TINY_SPO = {
    "data": {"init_args": {"num_envs": 2, "rollout_length": 4, "total_env_steps": 16, "buffer_size": 64,
                           "batch_size": 2, "sequence_length": 4, "gradient_steps": 1}},
    "model": {"init_args": {"hidden_sizes": [8], "num_particles": 2, "search_depth": 2, "resample_period": 2}},
    "trainer": {"enable_progress_bar": False},
}  # fmt: skip
TINY_DREAMER = {
    "data": {"init_args": {"num_envs": 2, "rollout_length": 4, "total_env_steps": 48, "buffer_size": 128,
                           "batch_size": 2, "sequence_length": 4, "replay_ratio": 0.25, "learning_starts": 16,
                           "commit_stride": 2}},
    "model": {"init_args": {"size": "tiny", "horizon": 3, "bins": 15, "warmup_steps": 0}},
    "trainer": {"enable_progress_bar": False},
}  # fmt: skip
RUNS = {"ppo": ("ppo.yaml", TINY_PPO, "PPO"), "spo": ("spo.yaml", TINY_SPO, "SPO"),
        "dreamer": ("dreamer.yaml", TINY_DREAMER, "DreamerV3")}  # fmt: skip

#: Run in a fresh interpreter: load the checkpoint, act on a batch of Dict observations from the env itself.
LOAD = """
import sys, torch
from rl_lightning import algos, keys
from rl_lightning.envs import BatchedEnv, ClassSpec, GymnasiumEnv
model = getattr(algos, sys.argv[2]).load_from_checkpoint(sys.argv[1], map_location="cpu")
env = BatchedEnv(GymnasiumEnv(env_class=ClassSpec("tests.space_envs.TwoKeyDict")), 3)
obs = env.reset()
assert obs[keys.OBS, "velocity"].dtype == torch.float64
action = model.act(obs, torch.Generator(), deterministic=True)[keys.ACTION]
out = env.step(action)
print("ACTED", tuple(action.shape), tuple(out[keys.REWARD].shape))
"""


def env(cls: str, backend: str = "GymnasiumEnv", **init_args: object) -> dict:
    spec = {"class_path": f"tests.space_envs.{cls}", "init_args": init_args}
    return {"class_path": f"rl_lightning.envs.{backend}", "init_args": {"env_class": spec}}


@pytest.mark.parametrize("algo", list(RUNS))
def test_dict_observations_fit_and_the_checkpoint_acts_in_a_fresh_process(tmp_path: Path, algo: str) -> None:
    base, tiny, name = RUNS[algo]
    done = run_cli(tmp_path, env("TwoKeyDict"), base=base, tiny=tiny)
    assert done.returncode == 0, done.stderr[-3000:]
    (ckpt,) = (tmp_path / "runs").rglob("last.ckpt")
    loaded = run_python(["-c", LOAD, str(ckpt), name])
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert "ACTED (3,) (3,)" in loaded.stdout


REFUSALS = [
    ("ppo", env("TupleObs"), ("observation space Tuple", "supported: Box (any dtype), Discrete, and Dict")),
    ("spo", env("MultiDiscreteBandit"), ("SPO does not support multi_discrete actions", "discrete, box")),
    ("dreamer", env("MultiBinaryBandit"), ("DreamerV3 does not support multi_binary actions", "discrete, box")),
]


@pytest.mark.parametrize(
    ("algo", "env_config", "fragments"), REFUSALS, ids=["tuple_obs", "spo_multidiscrete", "dreamer_multibinary"]
)  # fmt: skip
def test_unsupported_space_or_backend_is_one_line(tmp_path: Path, algo: str, env_config: dict, fragments) -> None:
    base, tiny, _ = RUNS[algo]
    done = run_cli(tmp_path, env_config, base=base, tiny=tiny)
    assert_one_line_error(done, *fragments)
    assert not list(tmp_path.rglob("*.ckpt"))
