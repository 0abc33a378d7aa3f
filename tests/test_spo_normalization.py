"""SPO with ``normalize_obs``: statistics from training rollouts only, read-only in search and evaluation."""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import torch

from rl_lightning import keys
from rl_lightning.algos import SPO
from rl_lightning.callbacks import Evaluation
from rl_lightning.envs import BatchedEnv, CartPole
from rl_lightning.networks.normalizers import PRIOR_COUNT
from tests.helpers import tiny_spo, trainer


def _stats(module: SPO) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.obs_normalizer.state_dict().items()}


def test_spo_stats_follow_training_rollouts_and_search_only_reads_them(tmp_path, monkeypatch):
    pl.seed_everything(0)
    module, dm = tiny_spo(total_env_steps=96, normalize_obs=True)
    seen: list[torch.Tensor] = []
    original = module.process_rollout

    def recording(batch):
        seen.append(batch[keys.OBS].clone())
        return original(batch)

    monkeypatch.setattr(module, "process_rollout", recording)
    evaluation = Evaluation(every_n_updates=1, num_episodes=2)
    trainer(tmp_path, callbacks=[evaluation]).fit(module, dm)
    assert len(seen) == 3  # 3 rollouts of 4 envs × 8 steps
    assert len(evaluation.history) >= 2  # searched between updates, without adding to the statistics
    obs = torch.cat([o.reshape(-1, 4) for o in seen]).double().numpy()
    n, mean = obs.shape[0], obs.mean(0)
    total = n + PRIOR_COUNT
    var = (PRIOR_COUNT + n * obs.var(0) + mean**2 * PRIOR_COUNT * n / total) / total
    np.testing.assert_allclose(module.obs_normalizer.rms.mean.numpy(), n * mean / total, rtol=1e-9)
    np.testing.assert_allclose(module.obs_normalizer.rms.var.numpy(), var, rtol=1e-9)
    # The networks see normalised observations, through the prior the search and the losses share.
    raw = torch.randn(5, 4) * 3
    expected = module.obs_normalizer(raw)
    assert not torch.allclose(expected, raw)
    assert torch.equal(module.prior.features(raw), expected)
    # A training-mode search (root noise, recorded targets) leaves the statistics as they are.
    before = _stats(module)
    module.train()
    env = BatchedEnv(CartPole(), 3, torch.device("cpu"), seed=5)
    obs_td = env.reset()
    module.acting_policy(env, training=True)(obs_td, torch.Generator().manual_seed(0))
    env.close()
    for key, value in _stats(module).items():
        assert torch.equal(value, before[key]), key


def test_spo_checkpoint_carries_the_statistics(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_spo(total_env_steps=64, normalize_obs=True)
    t = trainer(tmp_path)
    t.fit(module, dm)
    t.save_checkpoint(tmp_path / "spo.ckpt")
    loaded = SPO.load_from_checkpoint(tmp_path / "spo.ckpt", weights_only=False)
    assert float(loaded.obs_normalizer.rms.count) == float(module.obs_normalizer.rms.count) == 64 + PRIOR_COUNT
    for key, value in _stats(module).items():
        assert torch.equal(loaded.obs_normalizer.state_dict()[key], value), key
    assert loaded.prior.normalizer is loaded.obs_normalizer
