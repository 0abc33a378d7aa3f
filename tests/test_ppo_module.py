"""PPO module behaviour inside Trainer.fit: masks, policy lag, determinism, budget, continuous actions."""

from __future__ import annotations

import math

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs import TicTacToe
from rl_lightning.envs.base import EnvSpec, TorchEnv
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


class _TargetBandit(TorchEnv):
    """One-step episodes with a constant observation; reward ``−(a − 1)²`` for ``a`` in [−2, 2]: optimum a = 1."""

    spec = EnvSpec("TargetBandit", (1,), False, action_shape=(1,), action_low=(-2.0,), action_high=(2.0,))

    def reset_state(self, num, generator):
        return TensorDict({"t": torch.zeros(num)}, batch_size=[num])

    def observe(self, state):
        return TensorDict({keys.OBS: torch.ones(*state.batch_size, 1)}, batch_size=state.batch_size)

    def step_state(self, state, action, generator, inplace=False):
        reward = -(action.clamp(-2.0, 2.0).squeeze(-1) - 1.0).square()
        done = torch.ones(state.batch_size, dtype=torch.bool)
        out = {keys.OBS: torch.ones(*state.batch_size, 1), keys.FINAL_OBS: torch.ones(*state.batch_size, 1)}
        out.update({keys.REWARD: reward, keys.TERMINATED: done, keys.TRUNCATED: ~done, keys.IS_FIRST: done})
        return state, TensorDict(out, batch_size=state.batch_size)


def test_continuous_policy_learns_the_rewarded_action_and_logs_std(tmp_path):
    """From mean ≈ 0 the Gaussian policy moves to the optimum a = 1 of a one-step bandit in 24 updates."""
    pl.seed_everything(0)
    module, dm = tiny_ppo(env=_TargetBandit(), total_env_steps=64 * 24, lr=3e-3)
    obs = TensorDict({keys.OBS: torch.ones(1, 1)}, [1])
    start = float(module.act(obs, deterministic=True)[keys.ACTION])
    record = _Record()
    trainer(tmp_path, callbacks=[record]).fit(module, dm)
    mean = float(module.act(obs, deterministic=True)[keys.ACTION])
    assert abs(start) < 0.1
    assert mean == pytest.approx(1.0, abs=0.25)
    returns = [m["rollout/episode_return"] for m in record.metrics]
    assert sum(returns[-4:]) / 4 > sum(returns[:4]) / 4 + 0.5  # collected reward: E[−(a − 1)²] ≈ −2 at init
    assert record.metrics[-1]["policy/std"] == pytest.approx(float(module.log_std.detach().exp()))
