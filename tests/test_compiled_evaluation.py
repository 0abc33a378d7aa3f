"""The compiled evaluation step: same episodes as ``run_episodes``, no recompiles, the ``Evaluation(compile=True)``
callback in a fit, and its one-line refusals."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.algos import PPO
from rl_lightning.callbacks import Evaluation
from rl_lightning.envs import CartPole, Pendulum
from rl_lightning.errors import ConfigError
from rl_lightning.evaluation.episodes import play_episodes, run_episodes
from rl_lightning.evaluation.fused import CompiledEpisodes
from tests.helpers import tiny_ppo, trainer

ENVS = {"cartpole": lambda: CartPole(max_episode_steps=60), "pendulum": lambda: Pendulum(max_episode_steps=20)}


@pytest.mark.parametrize("name", list(ENVS))
def test_compiled_episodes_match_run_episodes(name):
    env = ENVS[name]()
    torch.manual_seed(0)
    module = PPO(env_spec=env.spec, hidden_sizes=(16,)).eval()
    compiled = CompiledEpisodes(module, env, 5, torch.device("cpu"))
    for index, seed in enumerate((3, 4)):
        expected = run_episodes(module, env, 5, torch.device("cpu"), seed, deterministic=True)
        with torch.compiler.set_stance("fail_on_recompile" if index else "default"):
            played = compiled.run(seed)
        returns, lengths = played.returns, played.lengths
        assert bool(played.finished.all())
        torch.testing.assert_close(lengths, expected[1], rtol=0, atol=0)
        torch.testing.assert_close(returns, expected[0], rtol=1e-5, atol=1e-4)
    short = play_episodes(module, env, 5, torch.device("cpu"), 3, deterministic=True, max_steps=12)
    with torch.compiler.set_stance("fail_on_recompile"):
        cut = compiled.run(3, max_steps=12)
    assert torch.equal(cut.finished, short.finished)  # the same episodes cut by max_steps
    assert not bool(cut.finished.all())


def test_evaluation_callback_plays_compiled_in_a_fit(tmp_path):
    """The end-of-fit evaluation (final weights) equals eager episodes of the trained module."""
    module, datamodule = tiny_ppo(total_env_steps=128)
    evaluation = Evaluation(every_n_updates=1, num_episodes=3, compile=True)
    trainer(tmp_path, callbacks=[evaluation]).fit(module, datamodule)
    assert len(evaluation.history) == 2
    returns, _ = run_episodes(module.eval(), CartPole(), 3, module.device, evaluation.seed, deterministic=True)
    assert evaluation.history[-1]["eval/episode_return"] == pytest.approx(float(returns.mean()))


def test_evaluation_callback_refusals(tmp_path):
    with pytest.raises(ConfigError, match="compile=true plays without rendering"):
        Evaluation(every_n_updates=1, num_episodes=2, record_video=1, compile=True)
    module, datamodule = tiny_ppo(total_env_steps=128)
    evaluation = Evaluation(every_n_updates=1, num_episodes=2, deterministic=False, compile=True)
    with pytest.raises(ConfigError, match="acts deterministically"):
        trainer(tmp_path, callbacks=[evaluation]).fit(module, datamodule)
