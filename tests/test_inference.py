"""Inference outside the trainer: checkpoints from ``rl-lightning fit`` (a subprocess) act in plain Gymnasium loops
in a fresh process (``tests/inference_loops.py``), as ``rl_lightning.load_policy`` promises; plus the conversions
and refusals of ``Policy`` in-process, and the README's example run as written.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from gymnasium import spaces
from tensordict import TensorDict

from rl_lightning import Policy, keys
from rl_lightning.algos import PPO
from rl_lightning.envs import Pendulum, TicTacToe
from rl_lightning.envs.base import BatchedEnv
from rl_lightning.errors import ConfigError
from tests.cli_subprocess import run_cli, run_python

ROOT = Path(__file__).resolve().parents[1]
EVAL_SEED = 12_345  # Evaluation's default seed: the plain loops replay its episodes

TINY_PPO = {"model": {"update_epochs": 1, "num_minibatches": 2, "hidden_sizes": [16]},
            "data": {"num_envs": 4, "num_steps": 16, "total_env_steps": 128}}  # fmt: skip
FITS: dict[str, dict[str, Any]] = {
    "ppo_cartpole": {"base": "ppo.yaml", "env_id": "CartPole-v1", "episodes": 4, **TINY_PPO},
    "ppo_pendulum": {"base": "ppo_pendulum.yaml", "env_id": "Pendulum-v1", "episodes": 2,
                     "model": {**TINY_PPO["model"], "normalize_obs": True}, "data": TINY_PPO["data"]},
    "spo_cartpole": {"base": "spo.yaml", "env_id": "CartPole-v1", "episodes": 2,
                     "model": {"hidden_sizes": [16], "num_particles": 4, "search_depth": 2, "resample_period": 2},
                     "data": {"num_envs": 4, "rollout_length": 8, "total_env_steps": 64, "buffer_size": 256,
                              "batch_size": 4, "sequence_length": 4, "gradient_steps": 2}},
    "dreamer_cartpole": {"base": "dreamer.yaml", "env_id": "CartPole-v1", "episodes": 2,
                         "model": {"size": "tiny", "horizon": 3, "bins": 15, "warmup_steps": 0},
                         "data": {"num_envs": 2, "rollout_length": 4, "total_env_steps": 64, "buffer_size": 256,
                                  "batch_size": 2, "sequence_length": 4, "replay_ratio": 0.25,
                                  "learning_starts": 16, "commit_stride": 2}},
}  # fmt: skip


def _fit(name: str, workdir: Path) -> tuple[Path, float]:
    """A tiny ``rl-lightning fit`` on a Gymnasium env; returns ``last.ckpt`` and the final ``eval/episode_return``."""
    fit = FITS[name]
    env = {"class_path": "rl_lightning.envs.GymnasiumEnv", "init_args": {"env_id": fit["env_id"]}}
    evaluation = {
        "class_path": "rl_lightning.callbacks.Evaluation",  # only the end-of-fit evaluation
        "init_args": {"every_n_env_steps": 1_000_000, "num_episodes": fit["episodes"], "seed": EVAL_SEED},
    }
    config = {"model": {"init_args": fit["model"]}, "data": {"init_args": {**fit["data"], "env": env}},
              "trainer": {"enable_progress_bar": False, "callbacks+": [evaluation],
                          "logger": {"init_args": {"save_dir": "runs", "name": name}}}}  # fmt: skip
    workdir.mkdir(parents=True)
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(config))
    done = run_cli(["fit", "--config", fit["base"], "--config", "tiny.yaml"], workdir)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (workdir / "runs" / name).glob("version_*")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return run_dir / "checkpoints" / "last.ckpt", events.Scalars("eval/episode_return")[-1].value


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``fitted(name)``: the checkpoint and final evaluation return of ``FITS[name]``, fitted once per module."""
    cache: dict[str, tuple[Path, float]] = {}

    def get(name: str) -> tuple[Path, float]:
        if name not in cache:
            cache[name] = _fit(name, tmp_path_factory.mktemp("fits") / name)
        return cache[name]

    return get


def _loops(kind: str, name: str, ckpt: Path) -> dict[str, Any]:
    """Run ``tests/inference_loops.py`` in a fresh process; its JSON result."""
    fit = FITS[name]
    args = [kind, str(ckpt), fit["env_id"], str(fit["episodes"]), str(EVAL_SEED)]
    done = run_python([str(ROOT / "tests" / "inference_loops.py"), *args])
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_ppo_cartpole_in_a_plain_gymnasium_loop_scores_what_evaluation_logged(fitted):
    ckpt, logged = fitted("ppo_cartpole")
    out = _loops("ppo", "ppo_cartpole", ckpt)
    assert out["mismatches"] == []  # every action is the module's own deterministic act, offset into the space
    assert np.mean(out["returns"]) == logged  # integer returns: the same episodes, step for step
    assert out["single_action_type"] == "int"
    assert len(out["batched_shape"]) == 1  # one int per observation
    assert out["batched_dtype"] == "int64"
    assert out["batched_equals_singles"]
    assert out["tensor_is_tensor"]
    assert out["tensor_equals_numpy"]
    assert out["forward_is_tensor"]
    assert out["forward_matches"]


def test_ppo_pendulum_with_normalisation_acts_on_the_saved_statistics(fitted):
    ckpt, logged = fitted("ppo_pendulum")
    out = _loops("ppo", "ppo_pendulum", ckpt)
    assert out["mismatches"] == []  # the mean, clipped to [-2, 2], float32, shape (1,)
    assert np.mean(out["returns"]) == pytest.approx(logged, rel=1e-5, abs=1e-3)  # logged as float32 sums
    assert out["batched_dtype"] == "float32"
    assert out["batched_shape"][1:] == [1]
    assert out["batched_equals_singles"]
    assert out["tensor_is_tensor"]
    assert out["tensor_equals_numpy"]
    assert out["forward_is_tensor"]
    assert out["forward_matches"]
    assert out["has_normalizer"]
    assert out["normalizer_changes_actions"]
    assert out["stats_frozen"]  # acting never updates the statistics


def test_spo_acts_with_its_prior_and_searches_as_evaluation_does(fitted):
    ckpt, logged = fitted("spo_cartpole")
    out = _loops("spo", "spo_cartpole", ckpt)
    assert len(out["prior_returns"]) == 2
    assert min(out["prior_returns"]) >= 1
    assert out["prior_mode_matches"]
    assert np.mean(out["search_returns"]) == logged  # same seeds, same generator: the evaluation's episodes
    assert out["live_after_close"] == 0  # every snapshot the search took was released


def test_dreamer_carries_and_resets_its_recurrent_state(fitted):
    ckpt, _ = fitted("dreamer_cartpole")
    out = _loops("dreamer", "dreamer_cartpole", ckpt)
    assert len(out["returns"]) == 2
    assert min(out["returns"]) >= 1
    assert out["mismatches"] == []  # = a DreamerPlayer driven by hand with is_first at each reset
    assert out["state_carried"]
    assert out["reset_clears"]
    assert out["row_reset"]


def _readme_example() -> str:
    """The README's example, which the inference guide (docs/guides/inference-export.md) repeats word for word."""
    found = {}
    for doc in ("README.md", "docs/guides/inference-export.md"):
        match = re.search(r"<!-- inference-example -->\s*```python\n(.*?)```", (ROOT / doc).read_text(), re.DOTALL)
        assert match, f"{doc} lost its inference example"
        found[doc] = match.group(1)
    assert found["README.md"] == found["docs/guides/inference-export.md"]
    return found["README.md"]


def test_readme_inference_example_runs_as_written(fitted, tmp_path):
    ckpt, _ = fitted("ppo_cartpole")
    example = _readme_example()
    (path,) = re.findall(r'load_policy\("([^"]+)"\)', example)
    (tmp_path / path).parent.mkdir(parents=True)
    shutil.copy(ckpt, tmp_path / path)
    done = run_python(["-c", example], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["episode 0", "episode 1", "episode 2"]
    assert all(float(line.split()[-1]) >= 1 for line in lines)


# ----- in-process: conversions and refusals on untrained modules ------------------------------------------------
def _pendulum_ppo() -> PPO:
    module = PPO(env_spec=Pendulum().spec, hidden_sizes=(8,))
    with torch.no_grad():
        module.actor[-1].bias.fill_(5.0)  # a mean far above the bound: the action must be clipped to 2
    return module


def test_box_actions_are_clipped_and_typed_as_the_space_says():
    obs = np.array([1.0, 0.0, 0.5], dtype=np.float32)
    policy = Policy(_pendulum_ppo())
    assert policy.action_space == spaces.Box(-2.0, 2.0, (1,), np.float32)  # rebuilt from the checkpoint's spec
    action = policy(obs)
    assert action.dtype == np.float32
    assert action.shape == (1,)
    assert action[0] == 2.0
    float64 = Policy(_pendulum_ppo(), action_space=spaces.Box(-2.0, 2.0, (1,), np.float64))
    assert float64(obs).dtype == np.float64


def test_discrete_start_is_added_and_a_wrong_space_refused():
    module = PPO(env_spec=TicTacToe().spec, hidden_sizes=(8,))
    obs = np.zeros(module.env_spec.obs_shape, dtype=np.float32)
    mask = np.zeros(9, dtype=bool)
    mask[4] = True
    plain = Policy(module)(obs, action_mask=mask)
    shifted = Policy(module, action_space=spaces.Discrete(9, start=10))(obs, action_mask=mask)
    assert (plain, shifted) == (4, 14)  # the only legal action, offset by start
    with pytest.raises(ConfigError, match=r"action_space=Discrete\(3\) does not match"):
        Policy(module, action_space=spaces.Discrete(3))


def test_bad_inputs_are_refused_in_one_line():
    module = PPO(env_spec=TicTacToe().spec, hidden_sizes=(8,))
    policy = Policy(module)
    obs = np.zeros(module.env_spec.obs_shape, dtype=np.float32)
    with pytest.raises(ConfigError, match="has action masks .* pass action_mask="):
        policy(obs)
    with pytest.raises(ConfigError, match=r"observation 'obs' of shape \(5,\) does not fit"):
        policy(np.zeros(5), action_mask=np.ones(9, dtype=bool))
    with pytest.raises(ConfigError, match=r"observation is a dict \(keys \['board'\]\)"):
        policy({"board": obs})  # TicTacToe's observation is one array
    with pytest.raises(ConfigError, match="policy.search is SPO's"):
        policy.search(BatchedEnv(TicTacToe(), 1))
    for error in (_one_line(lambda: policy(obs)), _one_line(lambda: policy({"board": obs}))):
        assert "\n" not in error


def _one_line(call: Any) -> str:
    with pytest.raises(ConfigError) as info:
        call()
    return str(info.value)


def test_calling_a_module_acts_like_its_deterministic_act():
    module = _pendulum_ppo().eval()
    batch = torch.tensor([[1.0, 0.0, 0.5], [0.0, 1.0, -3.0]])
    expected = module.act(TensorDict({keys.OBS: batch}, batch_size=[2]), deterministic=True)[keys.ACTION]
    assert torch.equal(module(batch), expected)  # the contract action: unclipped, as BatchedEnv takes it
    assert torch.equal(module(batch[1].numpy()), expected[1])


def test_sampled_actions_follow_the_seed():
    policy_a, policy_b = Policy(_pendulum_ppo(), seed=3), Policy(_pendulum_ppo(), seed=3)
    policy_b.module.load_state_dict(policy_a.module.state_dict())
    with torch.no_grad():
        policy_a.module.actor[-1].bias.zero_()
        policy_b.module.actor[-1].bias.zero_()
    batch = np.zeros((64, 3), dtype=np.float32)
    first, second = policy_a(batch, deterministic=False), policy_b(batch, deterministic=False)
    assert np.array_equal(first, second)
    assert len(np.unique(first)) > 1
    assert not np.array_equal(first, policy_a(batch, deterministic=False))


def test_dict_observations_single_and_batched_as_the_env_returns_them():
    """A ``Dict`` env's raw observation (a dict of arrays) acts like the module on the nested TensorDict."""
    from tests.test_spaces import gym

    core = gym("TwoKeyDict", length=2)
    module = PPO(env_spec=core.spec, hidden_sizes=(8,)).eval()
    policy = Policy(module)
    env = BatchedEnv(core, 3, seed=4)
    obs = env.reset()[keys.OBS]
    env.close()
    raw = {name: obs[name].numpy() for name in ("position", "velocity")}
    expected = module.act(TensorDict({keys.OBS: obs}, batch_size=[3]), deterministic=True)[keys.ACTION]
    assert policy(raw).tolist() == expected.tolist()
    assert [policy({k: v[i] for k, v in raw.items()}) for i in range(3)] == expected.tolist()
    with pytest.raises(ConfigError, match="has Dict observations"):
        policy(raw["position"])
    with pytest.raises(ConfigError, match="no key 'velocity'"):
        policy({"position": raw["position"]})
    with pytest.raises(ConfigError, match="mix one observation and a batch"):
        policy({"position": raw["position"], "velocity": raw["velocity"][0]})


#: Run in a fresh interpreter by the test below: load a multi-part-action PPO checkpoint and act on its bandit.
LOAD_MULTI = """
import json, sys
import numpy as np, torch
from tensordict import TensorDict
import rl_lightning
from rl_lightning import keys
from rl_lightning.algos import PPO
from tests import space_envs
ckpt, env = sys.argv[1], getattr(space_envs, sys.argv[2])()
policy = rl_lightning.load_policy(ckpt)
given = rl_lightning.load_policy(ckpt, action_space=env.action_space)
obs, _ = env.reset(seed=0)
action = policy(obs, deterministic=True)
env.step(action)  # the bandit asserts that the action is in its space
module = PPO.load_from_checkpoint(ckpt, map_location="cpu")
own = module.act(TensorDict({keys.OBS: torch.as_tensor(obs)[None]}, batch_size=[1]), deterministic=True)
print(json.dumps({"action": np.asarray(action).tolist(), "own": own[keys.ACTION][0].tolist(),
                  "given": np.asarray(given(obs, deterministic=True)).tolist(),
                  "batch": list(policy(np.stack([obs, obs])).shape), "space": str(policy.action_space),
                  "deterministic": policy.deterministic,
                  "eval_mode": not any(m.training for m in policy.module.modules())}))
"""


@pytest.mark.parametrize(
    ("cls", "space", "deterministic"),
    [("MultiDiscreteBandit", "MultiDiscrete([3 4 5])", True), ("MultiBinaryBandit", "MultiBinary((4,))", False)],
)
def test_multi_part_action_checkpoints_load_and_act_in_a_fresh_process(tmp_path, cls, space, deterministic):
    """PPO checkpoints of ``MultiDiscrete``/``MultiBinary`` envs act on the env; the policy samples or not as the run's
    ``Evaluation`` played (``deterministic: false`` for the second), and its module is in eval mode."""
    from tests.test_env_gymnasium_cli import TINY_PPO, run_cli

    init_args = {"every_n_env_steps": 1_000, "num_episodes": 2, "deterministic": deterministic}
    evaluation = {"class_path": "rl_lightning.callbacks.Evaluation", "init_args": init_args}
    tiny = {**TINY_PPO, "trainer": {"enable_progress_bar": False, "callbacks+": [evaluation]}}
    env = {
        "class_path": "rl_lightning.envs.GymnasiumEnv",
        "init_args": {"env_class": {"class_path": f"tests.space_envs.{cls}"}},
    }
    done = run_cli(tmp_path, env, tiny=tiny)
    assert done.returncode == 0, done.stderr[-3000:]
    (ckpt,) = (tmp_path / "runs").rglob("last.ckpt")
    loaded = run_python(["-c", LOAD_MULTI, str(ckpt), cls])
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    result = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert result["action"] == result["own"] == result["given"]
    assert result["batch"] == [2, len(result["own"])]
    assert result["space"] == space
    assert result["deterministic"] is deterministic
    assert result["eval_mode"]
