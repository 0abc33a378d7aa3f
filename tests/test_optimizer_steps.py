"""PPO's optimiser steps: straight on torch where Lightning's per-step wrappers would do nothing, through them
otherwise, with the same weights and the same step count either way."""

from __future__ import annotations

import lightning.pytorch as pl
import torch

from rl_lightning.algos.optimizer_steps import OptimizerSteps
from tests.helpers import tiny_ppo, trainer


class _CountOptimizerSteps(pl.Callback):
    """Watches every optimiser step (so Lightning's wrappers must run)."""

    def __init__(self) -> None:
        self.calls = 0

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.calls += 1


class _Spy(pl.Callback):
    def __init__(self) -> None:
        self.direct: list[bool] = []

    def on_train_start(self, trainer, pl_module) -> None:
        original = OptimizerSteps.__init__
        spy = self

        def init(self_, module, optimizer):
            original(self_, module, optimizer)
            spy.direct.append(self_.direct)

        self._patched = original
        OptimizerSteps.__init__ = init  # type: ignore[method-assign]

    def on_train_end(self, trainer, pl_module) -> None:
        OptimizerSteps.__init__ = self._patched  # type: ignore[method-assign]


def _fit(tmp_path, callbacks):
    pl.seed_everything(3)
    module, dm = tiny_ppo(total_env_steps=64 * 3)
    t = trainer(tmp_path, callbacks=callbacks)
    t.fit(module, dm)
    return t, module


def test_direct_and_wrapped_steps_give_the_same_weights_and_step_count(tmp_path):
    spy = _Spy()
    direct_trainer, direct = _fit(tmp_path / "direct", [spy])
    counter = _CountOptimizerSteps()
    wrapped_trainer, wrapped = _fit(tmp_path / "wrapped", [counter])

    assert spy.direct == [True, True, True]  # nothing watches the steps: torch directly
    steps = 3 * 2 * 2  # updates × epochs × minibatches
    assert counter.calls == steps  # a watcher sees every step: the wrappers ran
    assert direct_trainer.global_step == wrapped_trainer.global_step == steps
    for (name, a), b in zip(direct.state_dict().items(), wrapped.state_dict().values()):
        assert torch.equal(a, b), name


def test_standalone_update_counts_nothing_and_uses_the_plain_optimizer():
    module, _ = tiny_ppo()
    optimizer = torch.optim.Adam(module.parameters())
    steps = OptimizerSteps(module, optimizer)
    assert steps.direct
    assert not steps.credit
    assert steps.optimizer is optimizer


def test_orthogonal_init_is_optional():
    ortho, _ = tiny_ppo(hidden_sizes=(16, 16))
    default, _ = tiny_ppo(hidden_sizes=(16, 16), ortho_init=False)
    hidden = ortho.actor[0].weight  # [16, 4]: orthonormal columns scaled by √2
    assert torch.allclose(hidden.T @ hidden, 2.0 * torch.eye(4), atol=1e-5)
    assert torch.count_nonzero(ortho.actor[0].bias) == 0
    assert torch.count_nonzero(default.actor[0].bias) > 0  # PyTorch's uniform(±1/√fan_in) init
    weight = default.actor[0].weight
    assert not torch.allclose(weight.T @ weight, 2.0 * torch.eye(4), atol=1e-2)
    assert weight.abs().max() <= 4**-0.5  # kaiming_uniform(a=√5) bound = 1/√fan_in
