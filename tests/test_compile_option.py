"""``data.compile``: refused in one line where the fused step cannot run; a compiled fit in-process and by the CLI."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Callback

from rl_lightning.algos import PPO
from rl_lightning.data import OnPolicyDataModule
from rl_lightning.data.fused_collector import FusedCollector
from rl_lightning.data.fused_step import require_fusable
from rl_lightning.envs import CartPole, GymnasiumEnv
from rl_lightning.envs.base import EnvSpec
from rl_lightning.errors import ConfigError
from tests.cli_subprocess import error_line, run_cli
from tests.fault_envs import FaultyCartPole
from tests.helpers import tiny_ppo, tiny_spo, trainer

# The heavy tier (torch.compile builds): not in the default run; CI runs it as a step of its own.
pytestmark = pytest.mark.heavy

_MULTI = EnvSpec(name="Bandit", obs_shape=(3,), discrete=False, action_shape=(2,), action_nvec=(2, 3))


class _GrabCollector(Callback):
    """Keeps the datamodule's collector (teardown drops it)."""

    def on_train_end(self, trainer, pl_module) -> None:
        self.collector = trainer.datamodule.collector


def _ppo(spec: EnvSpec) -> PPO:
    return PPO(env_spec=spec, hidden_sizes=(8,))


REFUSED = [
    pytest.param(lambda: (_ppo(CartPole().spec), GymnasiumEnv("CartPole-v1")), "GymnasiumEnv steps outside", id="gym"),
    pytest.param(lambda: (_ppo(CartPole().spec), FaultyCartPole()), "overrides step_state", id="step-override"),
    pytest.param(lambda: (tiny_spo()[0], CartPole()), "SPO on discrete actions has none", id="spo"),
    pytest.param(lambda: (_ppo(_MULTI), CartPole()), "PPO on multi_discrete actions has none", id="multi-discrete"),
]


@pytest.mark.parametrize(("make", "message"), REFUSED)
def test_refused_in_one_line_naming_what_can(make, message):
    module, env = make()
    with pytest.raises(ConfigError, match=message) as error:
        require_fusable(module, env)
    assert "\n" not in str(error.value)
    assert "data.compile=true" in str(error.value)


def test_fit_refuses_before_any_env_is_built(tmp_path):
    env = GymnasiumEnv("CartPole-v1")
    datamodule = OnPolicyDataModule(env, num_envs=2, num_steps=8, total_env_steps=32, compile=True)
    module = PPO(env_spec=datamodule.env_spec, hidden_sizes=(8,), num_minibatches=2)
    with pytest.raises(ConfigError, match="set data.compile=false"):
        trainer(tmp_path).fit(module, datamodule)
    assert datamodule.collector is None


def test_compiled_fit_in_process(tmp_path):
    """Two updates collected by the compiled step: on-policy (lag 0), no recompile after the first rollout."""
    module, datamodule = tiny_ppo(total_env_steps=128)
    datamodule.compile = True
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    grab = _GrabCollector()
    trainer(tmp_path, callbacks=[grab]).fit(module, datamodule)
    assert module.updates == 2
    assert module.last_metrics["policy/lag"] == 0
    assert isinstance(grab.collector, FusedCollector)
    assert grab.collector.compile_seconds > 0
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= graphs + 1  # one graph for the whole fit


def test_cli_refuses_check_env_with_compile(tmp_path):
    args = ["fit", "--config", "ppo", "--data.init_args.compile", "true", "--data.init_args.check_env", "true"]
    assert "data.compile=true cannot validate actions" in error_line(run_cli(args, tmp_path))


def test_cli_fit_with_compile(tmp_path):
    """``configs/ppo.yaml`` with ``data.init_args.compile: true``: two updates, no warning printed."""
    args = ["fit", "--config", "ppo", "--data.init_args.compile", "true", "--data.init_args.total_env_steps", "512"]
    args += ["--trainer.enable_progress_bar", "false", "--data.init_args.eval_episodes", "2"]
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Warning" not in result.stderr, result.stderr[-3000:]
    checkpoint = torch.load(
        tmp_path / "runs" / "ppo_cartpole" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False
    )
    assert checkpoint["rl_counters"]["updates"] == 2
