"""SoftTargetUpdate: the Polyak formula, cadence per optimiser step, state, validation and gradient isolation."""

from __future__ import annotations

import copy
import re
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from rl_lightning.callbacks import SoftTargetUpdate
from rl_lightning.errors import ConfigError


class TargetNetModule(pl.LightningModule):
    """Manual optimisation with ``steps_per_batch`` optimiser steps per ``training_step`` (as SPO/PPO epochs do)."""

    def __init__(self, steps_per_batch: int = 4, lr: float = 0.1, batch_norm: bool = False) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.steps_per_batch = steps_per_batch
        self.lr = lr
        self.online = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)) if batch_norm else nn.Linear(3, 2)
        self.target = copy.deepcopy(self.online).requires_grad_(False)

    def target_networks(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.online, self.target)]

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        opt = self.optimizers()
        for _ in range(self.steps_per_batch):
            loss = (self.online(batch) - 1.0).pow(2).mean()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.online.parameters(), lr=self.lr)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(torch.randn(6, 3), batch_size=2)  # 3 batches


class NoTargets(TargetNetModule):
    target_networks = None  # type: ignore[assignment]


class EmptyTargets(TargetNetModule):
    def target_networks(self) -> list[tuple[nn.Module, nn.Module]]:
        return []


def fit_trainer(tmp_path, callbacks, **kwargs) -> pl.Trainer:
    defaults = {
        "default_root_dir": str(tmp_path),
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "callbacks": callbacks,
    }
    return pl.Trainer(**{**defaults, **kwargs})


def attach(callback: SoftTargetUpdate, module: TargetNetModule, *optimizers: torch.optim.Optimizer) -> None:
    """Register the callback on real torch optimisers without a Trainer (unit tests)."""
    trainer = SimpleNamespace(optimizers=list(optimizers))
    callback.setup(trainer, module, "fit")
    callback.on_fit_start(trainer, module)


def frozen_sgd(module: TargetNetModule) -> torch.optim.Optimizer:
    """A real optimiser whose steps leave the online weights alone (lr=0), so only the post-step hooks act."""
    return torch.optim.SGD(module.online.parameters(), lr=0.0)


def set_online(module: TargetNetModule, value: float) -> None:
    with torch.no_grad():
        for p in module.online.parameters():
            p.fill_(value)


@pytest.mark.parametrize(("tau", "k"), [(0.005, 1), (0.1, 5), (0.5, 3), (1.0, 2)])
def test_target_follows_polyak_closed_form(tau, k):
    torch.manual_seed(0)
    module = TargetNetModule()
    theta0 = [p.detach().clone() for p in module.target.parameters()]
    opt = frozen_sgd(module)
    callback = SoftTargetUpdate(tau=tau)
    attach(callback, module, opt)
    set_online(module, 0.7)  # theta1
    for _ in range(k):
        opt.step()
    assert callback.steps == k
    for target, start in zip(module.target.parameters(), theta0):
        expected = 0.7 + (1 - tau) ** k * (start - 0.7)
        torch.testing.assert_close(target, expected, atol=1e-6, rtol=0)


def test_every_n_steps_cadence_counts_updates():
    module = TargetNetModule()
    opt = frozen_sgd(module)
    callback = SoftTargetUpdate(tau=0.5, every_n_steps=3)
    attach(callback, module, opt)
    set_online(module, 1.0)
    with torch.no_grad():
        for p in module.target.parameters():
            p.zero_()
    for _ in range(7):
        opt.step()
    assert callback.steps == 7
    for p in module.target.parameters():  # two updates: 0 -> 0.5 -> 0.75
        torch.testing.assert_close(p, torch.full_like(p, 0.75))


def test_buffers_are_copied():
    module = TargetNetModule(batch_norm=True)
    opt = frozen_sgd(module)
    attach(SoftTargetUpdate(tau=0.01), module, opt)
    module.online(torch.randn(8, 3))  # moves the online running statistics
    opt.step()
    for online, target in zip(module.online.buffers(), module.target.buffers()):
        assert torch.equal(online, target)


def test_only_the_driving_optimizer_counts():
    module = TargetNetModule()
    first, second = frozen_sgd(module), frozen_sgd(module)
    callback = SoftTargetUpdate(optimizer_index=1)
    attach(callback, module, first, second)
    first.step()
    assert callback.steps == 0
    second.step()
    assert callback.steps == 1


def test_fires_once_per_optimizer_step_inside_training_step(tmp_path):
    torch.manual_seed(0)
    module = TargetNetModule(steps_per_batch=4)
    before = [p.detach().clone() for p in module.target.parameters()]
    callback = SoftTargetUpdate(tau=0.1)
    trainer = fit_trainer(tmp_path, [callback])
    trainer.fit(module)
    assert callback.steps == 12  # 3 batches x 4 optimiser steps
    assert any(not torch.equal(a, b) for a, b in zip(before, module.target.parameters()))
    assert callback._handle is None  # the hook is gone after fit
    trainer.optimizers[0].step()
    assert callback.steps == 12


def test_state_round_trip_and_resume(tmp_path):
    callback = SoftTargetUpdate(tau=0.01, every_n_steps=2)
    callback.steps = 41
    restored = SoftTargetUpdate(tau=0.01, every_n_steps=2)
    restored.load_state_dict(callback.state_dict())
    assert restored.state_dict() == {"steps": 41}
    assert callback.state_key == restored.state_key != SoftTargetUpdate(tau=0.02, every_n_steps=2).state_key
    assert callback.state_key != SoftTargetUpdate(tau=0.01, every_n_steps=3).state_key

    module = TargetNetModule(steps_per_batch=2)
    trainer = fit_trainer(tmp_path, [SoftTargetUpdate()])
    trainer.fit(module)
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    resumed = SoftTargetUpdate()
    fit_trainer(tmp_path, [resumed], max_epochs=2).fit(
        TargetNetModule(steps_per_batch=2), ckpt_path=tmp_path / "last.ckpt"
    )
    assert resumed.steps == 12  # 6 restored + 6 more


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tau": 0.0}, "SoftTargetUpdate: tau=0.0 must be in (0, 1]"),
        ({"tau": 1.5}, "SoftTargetUpdate: tau=1.5 must be in (0, 1]"),
        ({"every_n_steps": 0}, "SoftTargetUpdate: every_n_steps=0 must be >= 1"),
        ({"optimizer_index": -1}, "SoftTargetUpdate: optimizer_index=-1 must be >= 0"),
    ],
)
def test_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        SoftTargetUpdate(**kwargs)


@pytest.mark.parametrize("module_cls", [NoTargets, EmptyTargets])
def test_module_without_target_networks_fails_at_fit(tmp_path, module_cls):
    message = f"SoftTargetUpdate: {module_cls.__name__} declares no target networks (implement target_networks()"
    with pytest.raises(ConfigError, match=re.escape(message)):
        fit_trainer(tmp_path, [SoftTargetUpdate()]).fit(module_cls())


def test_rejects_mismatched_or_trainable_targets():
    module = TargetNetModule()
    module.target = nn.Linear(3, 4).requires_grad_(False)
    with pytest.raises(ValueError, match="pair 0 online/target parameters differ"):
        attach(SoftTargetUpdate(), module, frozen_sgd(module))
    module = TargetNetModule()
    module.target.requires_grad_(True)
    with pytest.raises(ValueError, match=r"pair 0 target requires grad"):
        attach(SoftTargetUpdate(), module, frozen_sgd(module))
    with pytest.raises(ConfigError, match="optimizer_index=1 must be < 1"):
        attach(SoftTargetUpdate(optimizer_index=1), TargetNetModule(), frozen_sgd(module))


def test_targets_get_no_gradient():
    module = TargetNetModule()
    opt = torch.optim.SGD(module.online.parameters(), lr=0.1)
    attach(SoftTargetUpdate(tau=0.5), module, opt)
    x = torch.randn(4, 3)
    for _ in range(2):  # second pass runs on targets already written by the hook
        opt.zero_grad()
        loss = (module.online(x) - module.target(x)).pow(2).mean()  # TD-style: the target regresses the online net
        loss.backward()
        assert all(p.grad is not None for p in module.online.parameters())
        assert all(p.grad is None and not p.requires_grad and p.is_leaf for p in module.target.parameters())
        opt.step()
