"""``PPO(compile_update=True)``: the whole minibatch step (or, where it cannot apply, the loss alone) through
``torch.compile`` learns what eager does (same seed, weights within float tolerance), compiles once per run (no
recompilation after the first update), and survives a deep copy."""

from __future__ import annotations

import copy

import lightning.pytorch as pl
import pytest
import torch
from tensordict import TensorDict
from torch._dynamo.utils import counters

from rl_lightning.algos.compiled_step import eligibility
from rl_lightning.algos.ppo_update import TERM_NAMES
from rl_lightning.envs import Pendulum
from tests.helpers import tiny_ppo, trainer

# The heavy tier (torch.compile builds): not in the default run; CI runs it as a step of its own.
pytestmark = pytest.mark.heavy


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


def _rollout(rows: int = 32, box: bool = False) -> TensorDict:
    """A processed rollout: CartPole-shaped, or (``box``) Pendulum-shaped with one continuous action."""
    g = torch.Generator().manual_seed(1)
    action = torch.randn(rows, 1, generator=g) if box else torch.randint(0, 2, (rows,), generator=g)
    return TensorDict(
        {
            "obs": torch.randn(rows, 3 if box else 4, generator=g),
            "action": action,
            "logprob": torch.full((rows,), -0.7),
            "value": torch.randn(rows, generator=g),
            "advantage": torch.randn(rows, generator=g) * 5,
            "return": torch.randn(rows, generator=g) * 5,
        },
        batch_size=[rows],
    )


def _update(module, optimizer_cls=torch.optim.Adam, box: bool = False, **optimizer_kwargs):
    """One standalone update (no Trainer: the step runs on torch directly) on a fixed rollout."""
    torch.manual_seed(0)
    module.generator.manual_seed(0)
    optimizer = optimizer_cls(module.parameters(), **{"lr": 1e-2, **optimizer_kwargs})
    terms = module.update(_rollout(box=box), optimizer)
    return terms, optimizer


def test_the_compiled_whole_step_matches_eager_clipping_adam_and_its_state():
    """The whole minibatch step compiled (loss, torch.func gradients, clip, Adam) against eager's loss.backward(),
    clip_grad_norm_ and torch.optim.Adam: the same weights, the same Adam moments and step counts, the same terms
    (the gradient norm before clipping among them), with the clip biting (max_grad_norm 0.05) and weight decay on, for
    a Gaussian policy (its state-independent log-std a parameter of the module itself; the fit test above is
    CartPole's categorical)."""
    eager, _ = tiny_ppo(Pendulum(), max_grad_norm=0.05, update_epochs=3, num_minibatches=4)
    compiled = copy.deepcopy(eager)
    compiled.hparams.compile_update = True
    eager_terms, eager_opt = _update(eager, box=True, weight_decay=1e-3)
    compiled_terms, compiled_opt = _update(compiled, box=True, weight_decay=1e-3)
    assert not torch.equal(compiled.log_std, tiny_ppo(Pendulum())[0].log_std)  # the log-std learnt too
    assert compiled.__dict__["_compiled_step_cache"][1] is not None  # the whole step really ran compiled
    assert float(eager_terms["grad_norm"]) > 0.05  # the clip was active
    for name in TERM_NAMES:
        torch.testing.assert_close(compiled_terms[name], eager_terms[name], rtol=1e-4, atol=1e-6, msg=name)
    for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=name)
    for a, b in zip(eager.parameters(), compiled.parameters()):
        sa, sb = eager_opt.state[a], compiled_opt.state[b]
        assert float(sb["step"]) == float(sa["step"]) == 12
        torch.testing.assert_close(sb["exp_avg"], sa["exp_avg"], rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(sb["exp_avg_sq"], sa["exp_avg_sq"], rtol=1e-4, atol=1e-9)


def test_an_optimiser_the_whole_step_does_not_cover_gets_the_compiled_loss_said_in_one_line():
    eager, _ = tiny_ppo()
    compiled = copy.deepcopy(eager)
    compiled.hparams.compile_update = True
    eager_terms, _ = _update(eager, torch.optim.SGD, momentum=0.9)
    with pytest.warns(UserWarning, match=r"model.compile_update: the optimiser is SGD, not torch.optim.Adam, so the "
                                         r"minibatch loss is compiled"):  # fmt: skip
        compiled_terms, _ = _update(compiled, torch.optim.SGD, momentum=0.9)
    assert compiled.__dict__["_compiled_step_cache"][1] is None
    for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=name)
    assert eligibility(torch.optim.Adam(eager.parameters()), direct=False).startswith("the step goes through")
    assert eligibility(torch.optim.Adam(eager.parameters(), amsgrad=True), direct=True) == "Adam's amsgrad=True"
