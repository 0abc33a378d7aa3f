"""The refusal of ``data.num_actors`` for a module that cannot collect in actors names the modules that can, as the
classes declare it (``supports_actor_processes``), not a list typed into the message."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rl_lightning.algos import FAMILIES, RLModule
from rl_lightning.data.actors.setup import check_actor_config
from rl_lightning.errors import ConfigError


class MyModule(RLModule):
    """A user's module that never says it collects in actor processes."""


def test_a_module_without_actor_support_is_told_which_modules_have_it() -> None:
    datamodule = SimpleNamespace(num_actors=1, max_policy_lag=1, actor_max_failures=3, actor_heartbeat_s=60.0,
                                 num_envs=4, actor_env_splits=1, selfplay=None, compile=False)  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        check_actor_config(datamodule, MyModule.__new__(MyModule))
    able = sorted(cls.__name__ for cls in FAMILIES.values() if cls.supports_actor_processes)
    assert able == ["AlphaZero", "DreamerV3", "PPO", "RecurrentPPO", "SPO"]  # BC reads records: nothing to collect
    message = str(refused.value)
    assert f"MyModule does not collect in actor processes yet ({', '.join(able)} do)" in message, message
    assert message.endswith("; set data.num_actors: 0")
