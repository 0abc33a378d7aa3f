"""``EvalRequests``: a Trainer built in Python plays validate/test requests through it; without it they are refused."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest

from rl_lightning.algos import PPO
from rl_lightning.callbacks import EvalRequests, Evaluation
from rl_lightning.data import OnPolicyDataModule
from rl_lightning.envs import CartPole
from rl_lightning.errors import ConfigError

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


def _setup() -> tuple[PPO, OnPolicyDataModule]:
    data = OnPolicyDataModule(env=CartPole(), num_envs=2, num_steps=4, total_env_steps=8, eval_episodes=3)
    return PPO(env_spec=data.env_spec, hidden_sizes=(4,), num_minibatches=1), data


@pytest.mark.parametrize(("stage", "prefix"), [("validate", "eval"), ("test", "test")])
def test_a_python_trainer_plays_the_request_with_the_runs_evaluation(stage, prefix):
    pl.seed_everything(0)
    model, data = _setup()
    evaluation = Evaluation(every_n_updates=1, num_episodes=5, seed=7, max_steps=2)  # every CartPole episode is cut
    trainer = pl.Trainer(callbacks=[evaluation, EvalRequests()], **QUIET)
    with pytest.warns(UserWarning, match="cut"):  # no episode ended within max_steps: NaN means, with a warning
        (metrics,) = getattr(trainer, stage)(model, datamodule=data)
    assert set(metrics) == {f"{prefix}/episode_return", f"{prefix}/episode_length", f"{prefix}/episodes_cut"}
    assert metrics[f"{prefix}/episodes_cut"] == 3  # the run's max_steps, and the request's 3 episodes (data)
    assert not model.eval_requests_attached  # detached at teardown


@pytest.mark.parametrize("stage", ["validate", "test"])
def test_a_request_nothing_plays_is_refused(stage):
    model, data = _setup()
    with pytest.raises(ConfigError, match=rf"^{stage}: nothing plays the evaluation request; add "
                                          r"rl_lightning\.callbacks\.EvalRequests\(\)"):  # fmt: skip
        getattr(pl.Trainer(**QUIET), stage)(model, datamodule=data)
