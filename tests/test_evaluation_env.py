"""The Evaluation callback's env (built once, never a copy of the training env) and its wait for the weights."""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from rl_lightning import keys
from rl_lightning.callbacks import Evaluation
from rl_lightning.envs import BatchedEnv, CartPole, GymnasiumEnv, make_eval_env
from rl_lightning.envs.gymnasium.atari import named_preset
from rl_lightning.envs.gymnasium.backend import draw_seeds
from rl_lightning.envs.gymnasium.factory import EnvFactory
from rl_lightning.evaluation.episodes import run_episodes
from tests.helpers import tiny_ppo, trainer


class CountingGymnasiumEnv(GymnasiumEnv):
    """A Gymnasium adapter that records every construction and refuses to be deep-copied."""

    instances: list[CountingGymnasiumEnv] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        CountingGymnasiumEnv.instances.append(self)

    def __deepcopy__(self, memo):
        raise AssertionError("a Gymnasium adapter (with its live envs) was deep-copied")


def test_eval_env_is_built_once_from_the_training_envs_arguments_and_closed(tmp_path, monkeypatch):
    monkeypatch.setattr(CountingGymnasiumEnv, "instances", [])
    pl.seed_everything(0)
    train_env = CountingGymnasiumEnv("CartPole-v1", {"max_episode_steps": 50})
    module, dm = tiny_ppo(env=train_env, total_env_steps=64 * 3)
    evaluation = Evaluation(every_n_updates=1, num_episodes=2)
    trainer(tmp_path, callbacks=[evaluation]).fit(module, dm)
    assert [h["updates"] for h in evaluation.history] == [1, 2, 3]
    assert len(CountingGymnasiumEnv.instances) == 2  # the training env and one eval env for all evaluations
    eval_env = CountingGymnasiumEnv.instances[1]
    assert eval_env.env_kwargs == {"max_episode_steps": 50}
    assert eval_env.live_count == 0  # closed at the end of the fit
    assert all(1 <= h["eval/episode_length"] <= 50 for h in evaluation.history)


def test_eval_results_on_a_torch_env_match_a_direct_run(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_ppo(env=CartPole(max_episode_steps=60), total_env_steps=64 * 2)
    evaluation = Evaluation(every_n_updates=1, num_episodes=3, seed=5)
    trainer(tmp_path, callbacks=[evaluation]).fit(module, dm)
    module.eval()
    returns, lengths = run_episodes(module, CartPole(max_episode_steps=60), 3, torch.device("cpu"), 5, True)
    last = evaluation.history[-1]
    assert last["updates"] == module.updates
    assert last["eval/episode_return"] == float(returns.mean())
    assert last["eval/episode_length"] == float(lengths.mean())


def test_fresh_env_has_the_same_arguments_and_no_shared_state():
    env = CartPole(max_episode_steps=60, dtype="float64")
    copy = env.fresh()
    assert copy is not env
    assert type(copy) is CartPole
    assert copy.spec == env.spec


class FakeEvent:
    """Stands in for ``torch.cuda.Event``: records when the current stream was told to wait on it."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def wait(self, stream=None) -> None:
        self.log.append("wait")


def test_evaluation_waits_on_policy_ready_event_before_acting(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_ppo(total_env_steps=64 * 2)
    log: list[str] = []
    module.policy_ready_event = FakeEvent(log)
    act = module.act

    def logged_act(*args, **kwargs):
        log.append("train" if module.training else "eval")  # Evaluation puts the module in eval mode
        return act(*args, **kwargs)

    module.act = logged_act
    evaluation = Evaluation(every_n_updates=1, num_episodes=2)
    trainer(tmp_path, callbacks=[evaluation]).fit(module, dm)
    phases = [entry for i, entry in enumerate(log) if i == 0 or entry != log[i - 1]]
    assert phases == ["train", "wait", "eval", "train", "wait", "eval"]


# ----- make_eval_env: the evaluation form as one plain Gymnasium env (load_policy on Atari) ----------------------
def _random_game(env, seed: int, steps: int = 5_000) -> tuple[list[float], list[int], bool]:
    """Rewards and lives of one episode of seeded random actions; whether it ended within ``steps``."""
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    rewards, lives = [], [info["lives"]]
    for _ in range(steps):
        _, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        rewards.append(float(reward))
        lives.append(info["lives"])
        if terminated or truncated:
            return rewards, lives, True
    return rewards, lives, False


def test_make_eval_env_plays_whole_atari_games_where_training_ends_at_a_life_loss():
    pytest.importorskip("ale_py")
    evaluation = make_eval_env("Breakout", atari_preset="baselines")
    assert evaluation.observation_space.shape == (4, 84, 84)
    _, lives, ended = _random_game(evaluation, seed=0)
    assert ended
    assert lives[0] == 5
    assert lives[-1] == 0  # one episode: the whole game
    training = EnvFactory("Breakout", atari=named_preset("baselines"))()
    _, lives, ended = _random_game(training, seed=0)
    assert ended
    assert lives[-1] == 4  # the training form ends the episode at the first life loss


def test_make_eval_env_gives_raw_scores_where_training_clips():
    pytest.importorskip("ale_py")
    raw, _, _ = _random_game(make_eval_env("SpaceInvaders", atari_preset="baselines"), seed=1, steps=300)
    clipped, _, _ = _random_game(EnvFactory("SpaceInvaders", atari=named_preset("baselines"))(), seed=1, steps=300)
    assert max(raw) > 1  # invaders are worth 5 to 30 points
    assert max(clipped) == 1


def test_make_eval_env_steps_as_the_evaluation_callbacks_env():
    """Reset with the seed ``play_episodes`` gives its first row, the same actions: the same frames and rewards."""
    pytest.importorskip("ale_py")
    rows = BatchedEnv(GymnasiumEnv("Breakout", atari_preset="baselines").fresh(), 1, seed=12_345)
    plain = make_eval_env("Breakout", atari_preset="baselines")
    expected = rows.reset()[keys.OBS][0].numpy()
    (seed,) = draw_seeds(1, torch.Generator().manual_seed(12_345))
    obs, _ = plain.reset(seed=seed)
    rng = np.random.default_rng(0)
    for _ in range(60):
        assert np.array_equal(obs, expected)
        action = int(rng.integers(4))
        out = rows.step(torch.tensor([action]))
        obs, reward, *_ = plain.step(action)
        assert reward == float(out[keys.REWARD][0])
        expected = out[keys.OBS][0].numpy()
    rows.close()
