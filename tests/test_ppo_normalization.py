"""PPO with ``normalize_obs`` / ``normalize_reward``: what the networks see, what the rollout keeps, when the
statistics move, and that they survive checkpoints, a fresh process and a resume."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
import yaml
from lightning.pytorch.callbacks import Callback
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import PPO
from rl_lightning.callbacks import Evaluation, RLCheckpoint
from rl_lightning.envs import CartPole, Pendulum
from rl_lightning.networks.normalizers import PRIOR_COUNT
from rl_lightning.objectives.gae import generalized_advantage_estimate
from tests.cli_subprocess import run_cli, run_python
from tests.helpers import tiny_ppo, trainer

ROOT = Path(__file__).resolve().parents[1]
NORM = {"normalize_obs": True, "normalize_reward": True}


class _Rollouts(Callback):
    """Keeps every training rollout (raw, as stored) and the normaliser state after each update."""

    def __init__(self) -> None:
        self.batches: list[TensorDict] = []
        self.states: list[dict[str, torch.Tensor]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches.append(trainer.datamodule.last_rollout.batch.clone())
        self.states.append(_norm_state(pl_module))


def _norm_state(module: PPO) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items() if "normalizer" in k or "scaler" in k}


def _closed_form(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, mean, var = data.shape[0], data.mean(0), data.var(0)
    total = n + PRIOR_COUNT
    return n * mean / total, (PRIOR_COUNT + n * var + mean**2 * PRIOR_COUNT * n / total) / total


def _with_weights_of(source: PPO, **kwargs) -> PPO:
    target = PPO(env_spec=source.env_spec, hidden_sizes=(16,), **kwargs)
    target.load_state_dict(source.state_dict(), strict=False)
    return target


def test_actor_and_critic_see_normalised_observations_everywhere():
    module, _ = tiny_ppo(Pendulum(), normalize_obs=True)
    module.obs_normalizer.update(torch.randn(64, 3) * torch.tensor([0.5, 0.5, 4.0]) + torch.tensor([0.2, -0.1, 1.0]))
    plain = _with_weights_of(module)
    obs = torch.randn(5, 3) * 3
    td, normalised = TensorDict({keys.OBS: obs}, [5]), TensorDict({keys.OBS: module.obs_normalizer(obs)}, [5])
    assert torch.equal(
        module.act(td, deterministic=True)[keys.ACTION], plain.act(normalised, deterministic=True)[keys.ACTION]
    )
    td[keys.ACTION] = torch.randn(5, 1)
    normalised[keys.ACTION] = td[keys.ACTION]
    for ours, theirs in zip(module.evaluate_actions(td), plain.evaluate_actions(normalised)):
        assert torch.equal(ours, theirs)
    # GAE bootstraps from V(normalised final_obs).
    rollout = TensorDict(
        {keys.FINAL_OBS: obs.reshape(5, 1, 3), keys.REWARD: torch.zeros(5, 1), keys.VALUE: torch.zeros(5, 1),
         keys.TERMINATED: torch.zeros(5, 1, dtype=torch.bool), keys.TRUNCATED: torch.ones(5, 1, dtype=torch.bool)},
        [5, 1],
    )  # fmt: skip
    bootstrap = module.process_rollout(rollout.clone())[keys.NEXT_VALUE]
    assert torch.equal(bootstrap, plain.critic(module.obs_normalizer(obs)).reshape(5, 1))
    assert not torch.allclose(bootstrap, plain.critic(obs).reshape(5, 1))  # the stats matter here


def test_rollout_keeps_raw_rewards_and_gae_uses_scaled_ones():
    module, _ = tiny_ppo(Pendulum(), normalize_reward=True, gamma=0.9)
    g = torch.Generator().manual_seed(0)
    rollout = TensorDict(
        {keys.FINAL_OBS: torch.randn(8, 2, 3, generator=g), keys.REWARD: -10 * torch.rand(8, 2, generator=g),
         keys.VALUE: torch.randn(8, 2, generator=g), keys.TERMINATED: torch.zeros(8, 2, dtype=torch.bool),
         keys.TRUNCATED: torch.rand(8, 2, generator=g) < 0.2},
        [8, 2],
    )  # fmt: skip
    raw = rollout[keys.REWARD].clone()
    out = module.process_rollout(rollout)
    assert torch.equal(out[keys.REWARD], raw)  # stored raw
    assert float(module.reward_scaler.rms.count) == pytest.approx(16 + PRIOR_COUNT)  # updated from this rollout
    scaled = module.reward_scaler(raw)
    assert not torch.allclose(scaled, raw)
    advantage, target = generalized_advantage_estimate(
        scaled, out[keys.VALUE], out[keys.NEXT_VALUE], out[keys.TERMINATED], out[keys.TRUNCATED], 0.9, 0.95
    )
    assert torch.equal(out[keys.ADVANTAGE], advantage)
    assert torch.equal(out[keys.RETURN], target)


def test_stats_come_from_training_rollouts_only_once_each_and_after_their_update(tmp_path, monkeypatch):
    pl.seed_everything(3)
    module, dm = tiny_ppo(Pendulum(), total_env_steps=64 * 3, **NORM)
    rollouts = _Rollouts()
    evaluation = Evaluation(every_n_updates=1, num_episodes=2)
    stored_logprob_matches: list[bool] = []
    original_update = module.update

    def checked_update(batch, optimizer):  # the update sees the inputs the rollout was acted on
        logprob, _, _ = module.evaluate_actions(batch)
        stored_logprob_matches.append(torch.allclose(logprob, batch[keys.LOGPROB], atol=1e-5))
        return original_update(batch, optimizer)

    monkeypatch.setattr(module, "update", checked_update)
    trainer(tmp_path, callbacks=[rollouts, evaluation]).fit(module, dm)
    assert len(evaluation.history) == 3  # evaluation ran between updates without touching the stats
    assert stored_logprob_matches == [True, True, True]
    for k, state in enumerate(rollouts.states, start=1):  # after update k: exactly the first k rollouts
        obs = torch.cat([b[keys.OBS].reshape(-1, 3) for b in rollouts.batches[:k]]).double().numpy()
        mean, var = _closed_form(obs)
        np.testing.assert_allclose(state["obs_normalizer.rms.mean"].numpy(), mean, rtol=1e-9)
        np.testing.assert_allclose(state["obs_normalizer.rms.var"].numpy(), var, rtol=1e-9)
        assert float(state["reward_scaler.rms.count"]) == pytest.approx(k * 64 + PRIOR_COUNT)


def test_evaluation_leaves_the_statistics_unchanged(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_ppo(Pendulum(), total_env_steps=64, **NORM)
    t = trainer(tmp_path)
    t.fit(module, dm)
    before = _norm_state(module)
    returns = [Evaluation(every_n_updates=1, num_episodes=3).evaluate(t, module)["eval/episode_return"] for _ in "ab"]
    module.train()
    module.act(TensorDict({keys.OBS: torch.randn(4, 3) * 9}, [4]))  # acting in train mode does not update either
    after = _norm_state(module)
    assert before.keys() == after.keys()
    assert len(before) == 6
    for key, value in before.items():
        assert torch.equal(value, after[key]), key
    assert returns[0] == returns[1]  # frozen statistics: the same episodes score the same


def test_episode_metrics_stay_raw_with_reward_scaling(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_ppo(CartPole(), total_env_steps=64 * 4, **NORM)
    trainer(tmp_path).fit(module, dm)
    metrics = module.last_metrics
    assert float(module.reward_scaler.rms.var) > 2.0  # CartPole returns vary: scaled rewards are not 1
    # CartPole pays 1 per step: a raw episode return equals its length.
    assert float(metrics["rollout/episode_return"]) == pytest.approx(float(metrics["rollout/episode_length"]))


class _Losses(Callback):
    def __init__(self) -> None:
        self.rows: list[tuple[int, float, float]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        m = pl_module.last_metrics
        self.rows.append((pl_module.updates, float(m["train/loss"]), float(m["train/approx_kl"])))


def _fit(tmp_path, budget_updates, ckpt_path=None):
    pl.seed_everything(7)
    module, dm = tiny_ppo(Pendulum(), total_env_steps=64 * budget_updates, num_minibatches=4, **NORM)
    losses = _Losses()
    checkpoint = RLCheckpoint(every_n_updates=1, dirpath=str(tmp_path / "ckpt"), save_last=True)
    trainer(tmp_path, callbacks=[losses, checkpoint], enable_checkpointing=True).fit(module, dm, ckpt_path=ckpt_path)
    return module, losses.rows


# The resumed run saves into the directory of the run it resumes, on purpose.
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty:UserWarning")
def test_resume_with_normalisation_is_bit_exact(tmp_path):
    straight, straight_rows = _fit(tmp_path / "a", 6)
    _, first_rows = _fit(tmp_path / "b", 3)
    resumed, resumed_rows = _fit(tmp_path / "b", 6, ckpt_path=str(tmp_path / "b" / "ckpt" / "last.ckpt"))
    assert first_rows + resumed_rows == straight_rows
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name
    assert torch.equal(straight.reward_scaler.returns, resumed.reward_scaler.returns)


_EVAL_SNIPPET = """
import sys, torch
from rl_lightning.algos import PPO
from rl_lightning.envs import Pendulum
from rl_lightning.evaluation.episodes import run_episodes
model = PPO.load_from_checkpoint(sys.argv[1], map_location="cpu").eval()
episodes = int(sys.argv[2])
returns, _ = run_episodes(model, Pendulum(), episodes, torch.device("cpu"), seed=12345, deterministic=True)
model.obs_normalizer = None
unnormalised, _ = run_episodes(model, Pendulum(), episodes, torch.device("cpu"), seed=12345, deterministic=True)
print(repr(float(returns.mean())), repr(float(unnormalised.mean())))
"""


def test_cli_fit_checkpoint_evaluates_in_a_fresh_process_as_in_the_run(tmp_path):
    """``rl-lightning fit`` on PPO Pendulum with both normalisers: the checkpoint holds the statistics, and the
    checkpoint loaded in a fresh process scores what the run's final evaluation logged to TensorBoard."""
    overrides = {"data.init_args.num_steps": 16, "data.init_args.total_env_steps": 768,
                 "model.init_args.update_epochs": 2, "model.init_args.num_minibatches": 4,
                 "model.init_args.normalize_obs": "true", "model.init_args.normalize_reward": "true",
                 "trainer.enable_progress_bar": "false"}  # fmt: skip
    args = [item for key, value in overrides.items() for item in (f"--{key}", str(value))]
    done = run_cli(["fit", "--config", "ppo_pendulum.yaml", *args], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = list((tmp_path / "runs").glob("*/version_*"))
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    state = torch.load(ckpt, weights_only=False)["state_dict"]
    assert float(state["obs_normalizer.rms.count"]) == pytest.approx(768 + PRIOR_COUNT)  # 3 rollouts of 16 × 16
    assert float(state["reward_scaler.rms.count"]) == pytest.approx(768 + PRIOR_COUNT)
    assert not torch.allclose(state["obs_normalizer.rms.var"], torch.ones(3, dtype=torch.float64))
    assert float(state["obs_normalizer.rms.mean"].abs().max()) > 0.01
    assert float(state["reward_scaler.rms.var"]) > 1.5  # Pendulum's discounted returns spread widely

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    in_run = events.Scalars("eval/episode_return")[-1].value  # the final evaluation, at the checkpoint's weights
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    (evaluation,) = [c for c in saved["trainer"]["callbacks"] if c["class_path"].endswith(".Evaluation")]
    done = run_python(["-c", _EVAL_SNIPPET, str(ckpt), str(evaluation["init_args"]["num_episodes"])])
    assert done.returncode == 0, done.stderr[-3000:]
    fresh, unnormalised = map(float, done.stdout.split()[-2:])
    assert fresh == pytest.approx(in_run, rel=1e-5, abs=1e-3)
    assert abs(unnormalised - fresh) > 1.0  # the loaded statistics are what made it match
