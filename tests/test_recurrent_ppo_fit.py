"""RecurrentPPO end to end: fit → stop → resume carries the open episodes' recurrent state, the bundled config fits
as an ``rl-lightning`` subprocess, and ``load_policy`` in a fresh process acts as the module's own player."""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning import keys
from rl_lightning.algos import RecurrentPPO
from rl_lightning.callbacks import RLCheckpoint
from rl_lightning.data import OnPolicyDataModule
from rl_lightning.envs import CartPole
from rl_lightning.envs.base import BatchedEnv
from tests.cli_subprocess import run_cli, run_python
from tests.helpers import trainer

ROOT = Path(__file__).resolve().parents[1]


class _CarriedState(Callback):
    """The collector's carried recurrent state (``h``) after every update."""

    def __init__(self) -> None:
        self.states: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.states.append(trainer.datamodule.collector._obs[keys.RECURRENT_STATE]["h"].clone())


def _fit(tmp_path: Path, updates: int, ckpt_path: str | None = None) -> tuple[RecurrentPPO, list[torch.Tensor]]:
    pl.seed_everything(3)
    env = CartPole(observe="position", max_episode_steps=30)  # episodes stay open across rollouts and the stop
    datamodule = OnPolicyDataModule(env, num_envs=4, num_steps=8, total_env_steps=32 * updates)
    module = RecurrentPPO(
        env_spec=env.spec, core_size=8, hidden_sizes=(8,), update_epochs=2, num_minibatches=2, normalize_obs=True
    )
    carried = _CarriedState()
    checkpoint = RLCheckpoint(every_n_updates=1, dirpath=str(tmp_path / "ckpt"), save_last=True)
    trainer(tmp_path, callbacks=[carried, checkpoint], enable_checkpointing=True).fit(
        module, datamodule, ckpt_path=ckpt_path
    )
    return module, carried.states


def test_resume_continues_the_open_episodes_with_their_recurrent_state(tmp_path):
    straight, straight_states = _fit(tmp_path / "a", 6)
    _, first_states = _fit(tmp_path / "b", 3)
    last = tmp_path / "b" / "ckpt" / "last.ckpt"
    with pytest.warns(UserWarning, match="exists and is not empty"):
        resumed, resumed_states = _fit(tmp_path / "b", 6, ckpt_path=str(last))
    assert resumed.updates == 6
    assert straight_states[2].abs().sum() > 0  # a non-zero state was open at the stop
    for a, b in zip(straight_states, first_states + resumed_states, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)


_ACT_IN_FRESH_PROCESS = """
import json, sys, torch
from rl_lightning import keys, load_policy
from rl_lightning.envs import CartPole
from rl_lightning.envs.base import BatchedEnv
policy = load_policy(sys.argv[1])
env = BatchedEnv(CartPole(observe="position"), 3, torch.device("cpu"), seed=11)
obs = env.reset()
policy.reset()
actions, states = [], []
for _ in range(40):
    action = policy(obs[keys.OBS], is_first=obs[keys.IS_FIRST])
    out = env.step(action)
    obs = out.select(keys.OBS, keys.IS_FIRST)
    actions.append(action.tolist())
    states.append(policy.state["h"].tolist())
print(json.dumps({"actions": actions, "states": states}))
"""


def test_bundled_config_fits_from_the_cli_and_load_policy_acts_as_the_module(tmp_path):
    args = ["fit", "--config", "ppo_lstm_cartpole_novel.yaml", "--data.init_args.total_env_steps", "256",
            "--trainer.enable_progress_bar", "false", "--trainer.logger.init_args.save_dir", "runs"]  # fmt: skip
    done = run_cli(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (ckpt,) = (tmp_path / "runs" / "ppo_lstm_cartpole_novel").glob("version_*/checkpoints/last.ckpt")
    acted = run_python(["-c", _ACT_IN_FRESH_PROCESS, str(ckpt)], timeout=120)
    assert acted.returncode == 0, acted.stderr[-3000:]
    loaded = json.loads(acted.stdout.strip().splitlines()[-1])

    module = RecurrentPPO.load_from_checkpoint(ckpt, weights_only=False).eval()
    assert module.updates == 1
    assert module.hparams.core == "lstm"
    assert not module.hparams.shared_core
    env = BatchedEnv(CartPole(observe="position"), 3, torch.device("cpu"), seed=11)
    obs = env.reset()
    state = None
    for step in range(40):  # the module's own acting, the state carried by hand as the training collector does
        if state is not None:
            obs[keys.RECURRENT_STATE] = state
        acted = module.act(obs, None, deterministic=True)
        state = acted[keys.NEXT_RECURRENT_STATE]
        assert acted[keys.ACTION].tolist() == loaded["actions"][step]
        torch.testing.assert_close(state["h"], torch.tensor(loaded["states"][step]))
        obs = env.step(acted[keys.ACTION]).select(keys.OBS, keys.IS_FIRST)
    assert env.state["elapsed"].min() < 40  # an episode ended and restarted inside the loop (is_first resets)
