"""PPO module behaviour inside Trainer.fit: masks, policy lag, determinism, budget, continuous actions."""

from __future__ import annotations

import math

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs import Pendulum, TicTacToe
from tests.helpers import tiny_ppo, trainer


def test_masked_policy_never_selects_an_illegal_action():
    module, _ = tiny_ppo(env=TicTacToe())
    g = torch.Generator().manual_seed(0)
    n = 4096
    mask = torch.rand(n, 9, generator=g) < 0.3
    mask[torch.arange(n), torch.randint(0, 9, (n,), generator=g)] = True  # at least one legal move
    # Make the illegal actions the most attractive ones: the mask must still win.
    with torch.no_grad():
        module.actor[-1].bias.copy_(torch.linspace(5.0, -5.0, 9))
    td = TensorDict({keys.OBS: torch.randn(n, 27, generator=g), keys.ACTION_MASK: mask}, [n])
    for deterministic in (False, True):
        action = module.act(td, g, deterministic=deterministic)[keys.ACTION]
        assert mask.gather(1, action.unsqueeze(1)).all()
    logprob, entropy, _ = module.evaluate_actions(td.update(module.act(td, g)))
    assert torch.isfinite(logprob).all()
    assert torch.isfinite(entropy).all()


class _Record(Callback):
    def __init__(self):
        self.metrics = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.metrics.append(
            {
                k: "nan" if math.isnan(float(v)) else float(v)  # no episode finished in that rollout
                for k, v in pl_module.last_metrics.items()
                if k != "perf/env_sps" and not k.startswith("perf/")
            }
        )


def test_policy_lag_is_zero_and_each_step_collects_once(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_ppo(total_env_steps=64 * 5)
    record = _Record()
    trainer(tmp_path, callbacks=[record]).fit(module, dm)
    assert [m["policy/lag"] for m in record.metrics] == [0.0] * 5
    assert module.updates == 5
    assert module.policy_version == 5
    assert dm.env_steps == 64 * 5  # no prefetched extra rollout


def test_run_stops_at_env_step_budget_or_max_steps(tmp_path):
    module, dm = tiny_ppo(total_env_steps=200)  # 64 per update → 4 updates (rounded up)
    trainer(tmp_path).fit(module, dm)
    assert module.updates == 4
    assert dm.env_steps == 256
    module, dm = tiny_ppo(total_env_steps=10_000)
    t = trainer(tmp_path, max_steps=8)  # global_step counts optimiser steps: 2 epochs × 2 minibatches per update
    t.fit(module, dm)
    assert module.updates == 2
    assert t.global_step == 8


def _run(tmp_path, seed):
    pl.seed_everything(seed)
    module, dm = tiny_ppo(total_env_steps=64 * 4)
    record = _Record()
    trainer(tmp_path, callbacks=[record]).fit(module, dm)
    return record.metrics, module


def test_same_seed_gives_identical_metrics_on_cpu(tmp_path):
    first, module_a = _run(tmp_path, 3)
    torch.manual_seed(999)  # global RNG state must not matter: sampling uses explicit generators
    second, module_b = _run(tmp_path, 3)
    assert first == second
    for a, b in zip(module_a.parameters(), module_b.parameters()):
        assert torch.equal(a, b)
    third, _ = _run(tmp_path, 4)
    assert third != first


def test_continuous_policy_learns_shapes_and_logs_std(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_ppo(env=Pendulum(), total_env_steps=128)
    record = _Record()
    trainer(tmp_path, callbacks=[record]).fit(module, dm)
    assert "policy/std" in record.metrics[-1]
    rollout = dm.last_rollout.batch
    assert rollout[keys.ACTION].shape == (16, 4, 1)
    assert torch.isfinite(rollout[keys.ADVANTAGE]).all()
