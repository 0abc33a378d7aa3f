"""``PPO(compile_update=True)``: the minibatch loss through ``torch.compile`` learns what eager does (same seed, weights
within float tolerance), compiles once per run (no recompilation after the first update), and survives a deep copy."""

from __future__ import annotations

import copy

import lightning.pytorch as pl
import torch
from torch._dynamo.utils import counters

from tests.helpers import tiny_ppo, trainer


def _fit(tmp_path, compile_update: bool, updates: int = 4):
    pl.seed_everything(0)
    module, dm = tiny_ppo(total_env_steps=64 * updates, compile_update=compile_update)
    trainer(tmp_path).fit(module, dm)
    return module


def test_compiled_update_matches_eager_and_compiles_once(tmp_path):
    torch._dynamo.reset()
    counters.clear()
    eager = _fit(tmp_path / "eager", False)
    assert counters["stats"]["unique_graphs"] == 0
    compiled = _fit(tmp_path / "compiled", True)
    graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 1  # the loss really ran compiled
    for (name, a), b in zip(eager.state_dict().items(), compiled.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)
    # a second run of the same module keeps its graph: no recompilation after warm-up
    dm = tiny_ppo(total_env_steps=64 * 2)[1]
    trainer(tmp_path / "again").fit(compiled, dm)
    assert counters["stats"]["unique_graphs"] == graphs


def test_a_deep_copy_compiles_its_own_graph():
    module, _ = tiny_ppo(compile_update=True)
    mb = {
        "obs": torch.randn(8, 4),
        "action": torch.randint(0, 2, (8,)),
        "logprob": torch.full((8,), -0.7),
        "value": torch.zeros(8),
        "advantage": torch.randn(8),
        "return": torch.randn(8),
    }
    loss, _ = module._minibatch_loss(mb)
    twin = copy.deepcopy(module)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(1.0)
    twin_loss, _ = twin._minibatch_loss(mb)
    eager_twin_loss, _ = twin.minibatch_loss(mb)
    torch.testing.assert_close(twin_loss, eager_twin_loss)
    assert not torch.equal(loss, twin_loss)
