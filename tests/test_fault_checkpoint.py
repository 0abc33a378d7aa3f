"""FaultCheckpoint in-process: a failure mid-rollout or mid-update saves the state of the last completed update."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from rl_lightning.callbacks import FaultCheckpoint
from rl_lightning.envs import BatchedEnv, CartPole
from rl_lightning.errors import EnvError
from tests.fault_envs import FaultyCartPole
from tests.helpers import tiny_ppo, trainer

STEPS_PER_ENV = 16  # tiny_ppo: 4 envs × 16 steps per update


def _fit(root, updates, env=None, ckpt_path=None, patch=None):
    pl.seed_everything(3)
    module, dm = tiny_ppo(env or CartPole(), total_env_steps=64 * updates)
    if patch is not None:
        patch(module)
    trainer(root, callbacks=[FaultCheckpoint()]).fit(module, dm, ckpt_path=ckpt_path)
    return module, dm


def _resume_and_compare(tmp_path, failed_root):
    last = failed_root / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=False)
    assert saved["rl_counters"]["updates"] == 3
    straight, straight_dm = _fit(tmp_path / "straight", 6)
    resumed, resumed_dm = _fit(tmp_path / "resumed", 6, ckpt_path=str(last))
    assert resumed.updates == straight.updates == 6
    assert resumed_dm.env_steps == straight_dm.env_steps == 6 * 64
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)  # collector RNG, env state and optimiser all as of update 3


def test_env_raising_mid_rollout_saves_the_last_completed_update(tmp_path):
    env = FaultyCartPole(fail_at=3 * STEPS_PER_ENV + 5)  # 5 steps into the 4th rollout
    with pytest.raises(RuntimeError, match="physics blew up") as info:
        _fit(tmp_path / "failed", 6, env=env)
    assert any("checkpoint of update 3 saved to" in note for note in info.value.__notes__)
    _resume_and_compare(tmp_path, tmp_path / "failed")


def test_model_raising_mid_update_saves_the_weights_before_it(tmp_path):
    def fail_in_4th_update(module):
        step = module._minibatch_step
        calls = []

        def flaky(*args):  # tiny_ppo: 2 epochs × 2 minibatches = 4 optimiser steps per update
            calls.append(1)
            if len(calls) == 3 * 4 + 3:  # two optimiser steps of update 4 already changed the weights
                raise ValueError("loss exploded")
            return step(*args)

        module._minibatch_step = flaky

    with pytest.raises(ValueError, match="loss exploded"):
        _fit(tmp_path / "failed", 6, patch=fail_in_4th_update)
    _resume_and_compare(tmp_path, tmp_path / "failed")


def test_failing_write_leaves_the_earlier_checkpoint_intact(tmp_path, monkeypatch):
    folder = tmp_path / "failed" / "checkpoints"
    folder.mkdir(parents=True)
    (folder / "last.ckpt").write_bytes(b"earlier checkpoint")

    def torn_write(self, checkpoint, path, storage_options=None):
        with open(path, "wb") as handle:
            handle.write(b"half a checkp")
        raise OSError("No space left on device")

    monkeypatch.setattr("lightning.fabric.plugins.io.torch_io.TorchCheckpointIO.save_checkpoint", torn_write)
    with pytest.raises(RuntimeError, match="physics blew up") as info:
        _fit(tmp_path / "failed", 6, env=FaultyCartPole(fail_at=2 * STEPS_PER_ENV + 1))
    assert (folder / "last.ckpt").read_bytes() == b"earlier checkpoint"
    assert sorted(p.name for p in folder.iterdir()) == ["last.ckpt"]  # no temporary file left behind
    assert any("could not save" in note and "No space left" in note for note in info.value.__notes__)


def test_failure_before_any_update_writes_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="physics blew up"):
        _fit(tmp_path, 6, env=FaultyCartPole(fail_at=STEPS_PER_ENV // 2))
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize("key", ["obs", "final_obs", "reward"])
def test_nonfinite_env_output_is_reported_once_per_rollout_with_env_and_index(key):
    env = BatchedEnv(CartPole(), num_envs=4)
    out = env.reset()
    steps = [out.clone() for _ in range(3)]
    for step in steps:
        step["final_obs"] = step["obs"].clone()
        step["reward"] = torch.ones(4)
    steps[1][key][2] = float("nan") if key != "reward" else float("inf")
    env.watch(torch.stack(steps[:1]))
    env.check_outputs()  # finite so far: no error
    env.watch(torch.stack(steps))
    with pytest.raises(EnvError, match=rf"env 'CartPole' \(index 2 of 4\) returned a non-finite '{key}'"):
        env.check_outputs()
    env.check_outputs()  # the watch restarts after a report
