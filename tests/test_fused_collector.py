"""The fused rollout step: eager against the per-step collector, compiled against eager, no recompiles, resume."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import PPO
from rl_lightning.data import Collector
from rl_lightning.data.fused_collector import FusedCollector
from rl_lightning.envs import BatchedEnv, CartPole, Catch, Pendulum

ENVS = {
    "cartpole": lambda: CartPole(max_episode_steps=12),
    "pendulum": lambda: Pendulum(max_episode_steps=6),
    "catch": lambda: Catch(rows=4, columns=4, size=8),
}
NUM_ENVS, NUM_STEPS = 4, 8


def _module(env) -> PPO:
    torch.manual_seed(0)
    return PPO(env_spec=env.spec, hidden_sizes=(16,))


def _equal(a: TensorDict, b: TensorDict) -> bool:
    names = sorted(a.keys(True, True))
    return names == sorted(b.keys(True, True)) and all(torch.equal(a[k], b[k]) for k in names)


@pytest.mark.parametrize("name", ["cartpole", "catch"])
def test_eager_fused_reproduces_the_per_step_collector_bit_for_bit(name):
    """Uniform draws (Gumbel-max sampling, uniform resets) taken as one ``[T, B, ...]`` block per rollout are the
    same CPU stream as ``T`` per-step draws, so rollouts, episode stats and live state match exactly."""
    env = ENVS[name]()
    module = _module(env)
    per_step = Collector(BatchedEnv(env, NUM_ENVS, seed=1), seed=2)
    fused = FusedCollector(BatchedEnv(env, NUM_ENVS, seed=1), seed=2)
    for version in range(3):
        expected = per_step.rollout(module.act, NUM_STEPS, version)
        assert _equal(fused.rollout(module, NUM_STEPS, version), expected)
        torch.testing.assert_close(fused.episode_stats(), per_step.episode_stats(), rtol=0, atol=0, equal_nan=True)
    assert _equal(fused.env.state, per_step.env.state)


def test_eager_fused_gaussian_draws_are_a_different_but_seeded_stream():
    """torch's CPU normal sampler fills a block differently from row-by-row draws: Box actions differ from the
    per-step collector's, and are identical for the same seed."""
    env = ENVS["pendulum"]()
    module = _module(env)
    per_step = Collector(BatchedEnv(env, NUM_ENVS, seed=1), seed=2).rollout(module.act, NUM_STEPS, 0)
    runs = [FusedCollector(BatchedEnv(env, NUM_ENVS, seed=1), seed=2).rollout(module, NUM_STEPS, 0) for _ in range(2)]
    assert _equal(runs[0], runs[1])
    assert not torch.equal(runs[0][keys.ACTION], per_step[keys.ACTION])
    assert torch.equal(runs[0][keys.OBS][0], per_step[keys.OBS][0])  # same start states: env noise matches


@pytest.fixture(scope="module")
def compiled_runs():
    """One compiled collector per env (compiling is the slow part), with its module and the first rollouts."""
    runs = {}
    for name, make in ENVS.items():
        env = make()
        module = _module(env)
        eager = FusedCollector(BatchedEnv(env, NUM_ENVS, seed=1), seed=2)
        compiled = FusedCollector(BatchedEnv(env, NUM_ENVS, seed=1), seed=2, compile=True)
        pairs = [(eager.rollout(module, NUM_STEPS, v), compiled.rollout(module, NUM_STEPS, v)) for v in range(2)]
        runs[name] = (module, compiled, pairs)
    return runs


@pytest.mark.parametrize("name", list(ENVS))
def test_compiled_step_agrees_with_eager_on_the_same_seed(compiled_runs, name):
    _, compiled, pairs = compiled_runs[name]
    assert compiled.compile_seconds > 0
    for eager, fast in pairs:
        assert sorted(eager.keys()) == sorted(fast.keys())
        for key in eager.keys(True, True):
            assert fast[key].dtype == eager[key].dtype, key
            torch.testing.assert_close(fast[key], eager[key], rtol=1e-4, atol=1e-5, msg=key)


def test_no_recompile_after_warm_up(compiled_runs):
    """Optimiser steps (in-place weight changes), eval/train switches (as evaluation does) and new store tensors
    reuse the one compiled graph."""
    module, compiled, _ = compiled_runs["cartpole"]
    counters = torch._dynamo.utils.counters
    graphs = counters["stats"]["unique_graphs"]
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    with torch.compiler.set_stance("fail_on_recompile"):
        for version in range(3):
            batch = compiled.rollout(module, NUM_STEPS, version)
            module.eval()
            module.train()
            loss = -module.evaluate_actions(batch.reshape(-1))[0].mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert counters["stats"]["unique_graphs"] == graphs


def test_resume_continues_bit_for_bit():
    """A collector restored from ``state_dict`` goes on exactly as the per-step collector does without a break."""
    env = ENVS["cartpole"]()
    module = _module(env)
    reference = Collector(BatchedEnv(env, NUM_ENVS, seed=1), seed=2)
    first = FusedCollector(BatchedEnv(env, NUM_ENVS, seed=1), seed=2)
    reference.rollout(module.act, NUM_STEPS, 0)
    first.rollout(module, NUM_STEPS, 0)
    resumed = FusedCollector(BatchedEnv(env, NUM_ENVS, seed=9), seed=9)
    resumed.load_state_dict(first.state_dict())
    for version in (1, 2):
        assert _equal(resumed.rollout(module, NUM_STEPS, version), reference.rollout(module.act, NUM_STEPS, version))
