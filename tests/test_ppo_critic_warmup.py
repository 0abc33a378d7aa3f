"""``critic_warmup_updates``: the first updates train the critic only; the actor keeps its starting weights."""

from __future__ import annotations

import copy

import lightning.pytorch as pl
import pytest
import torch

from rl_lightning.errors import ConfigError
from tests.helpers import tiny_ppo, trainer


def _fit(tmp_path, warmup: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """``(module before, module after)`` two updates with ``critic_warmup_updates=warmup``."""
    pl.seed_everything(0)
    module, datamodule = tiny_ppo(total_env_steps=128, critic_warmup_updates=warmup)
    before = copy.deepcopy(module)
    trainer(tmp_path).fit(module, datamodule)
    assert module.updates == 2
    return before, module


def _moved(before: torch.nn.Module, after: torch.nn.Module, net: str) -> bool:
    pairs = zip(getattr(before, net).parameters(), getattr(after, net).parameters(), strict=True)
    return any(not torch.equal(a, b) for a, b in pairs)


def test_the_actor_waits_while_the_critic_warms_up(tmp_path):
    before, after = _fit(tmp_path / "a", warmup=2)
    assert not _moved(before, after, "actor")
    assert _moved(before, after, "critic")
    before, after = _fit(tmp_path / "b", warmup=1)  # the second update moves the actor
    assert _moved(before, after, "actor")


def test_a_negative_warmup_is_refused():
    with pytest.raises(ConfigError, match=r"model.critic_warmup_updates=-1 is invalid: use 0 \(off\)"):
        tiny_ppo(critic_warmup_updates=-1)


def test_a_warmup_with_the_compiled_loss_is_refused():
    """The warm-up switch is read inside ``minibatch_loss``: compiled, every update would recompile it."""
    with pytest.raises(ConfigError, match=r"model.critic_warmup_updates=3 is invalid: .*set compile_update: false"):
        tiny_ppo(critic_warmup_updates=3, compile_update=True)
