"""The Evaluation callback's random baseline in every action kind, cut episodes in a fit, and the module's mode."""

from __future__ import annotations

import math
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.callbacks import Evaluation
from rl_lightning.envs import CartPole, ClassSpec, GymnasiumEnv, TicTacToe
from rl_lightning.envs.base import EnvSpec
from rl_lightning.envs.random_action import random_action
from tests.eval_form_envs import TwoFormEnv
from tests.helpers import tiny_ppo, trainer

CLIP_ACTION = ClassSpec("gymnasium.wrappers.ClipAction", {})


def _rows(n: int, mask: torch.Tensor | None = None) -> TensorDict:
    obs = TensorDict({keys.OBS: torch.zeros(n, 1)}, batch_size=[n])
    if mask is not None:
        obs[keys.ACTION_MASK] = mask
    return obs


def _draw(spec: EnvSpec, n: int = 4_000, seed: int = 0, mask: torch.Tensor | None = None) -> torch.Tensor:
    return random_action(spec, _rows(n, mask), torch.Generator().manual_seed(seed))


def test_multi_discrete_and_multi_binary_draws_cover_their_ranges_and_follow_the_seed():
    nvec = (3, 4, 5)
    multi = EnvSpec("md", (1,), discrete=False, action_shape=(3,), action_nvec=nvec)
    actions = _draw(multi)
    assert actions.shape == (4_000, 3)
    assert actions.dtype == torch.int64
    for dim, n in enumerate(nvec):
        counts = torch.bincount(actions[:, dim], minlength=n)
        assert len(counts) == n  # nothing outside 0..n-1
        assert bool((counts > 4_000 / n * 0.8).all())  # uniform: every class about 1/n of the draws
    binary = EnvSpec("mb", (1,), discrete=False, action_shape=(2, 2), action_binary=True)
    bits = _draw(binary)
    assert bits.shape == (4_000, 2, 2)
    assert set(bits.unique().tolist()) == {0, 1}
    assert abs(float(bits.float().mean()) - 0.5) < 0.03
    assert torch.equal(_draw(multi, seed=3), _draw(multi, seed=3))
    assert not torch.equal(_draw(multi, seed=3), _draw(multi, seed=4))


def test_box_draws_follow_gymnasium_box_sample_for_each_kind_of_bound():
    inf = math.inf
    spec = EnvSpec(
        "box",
        (1,),
        discrete=False,
        action_shape=(4,),
        action_low=(-2.0, -inf, 1.0, -inf),
        action_high=(2.0, inf, inf, 0.5),
    )
    actions = _draw(spec)
    assert bool(torch.isfinite(actions).all())
    bounded, normal, above, below = actions.unbind(-1)
    assert bool((bounded >= -2).all() and (bounded <= 2).all())
    assert abs(float(bounded.mean())) < 0.1
    assert abs(float(bounded.std()) - 4 / math.sqrt(12)) < 0.05
    assert abs(float(normal.mean())) < 0.1
    assert abs(float(normal.std()) - 1) < 0.05
    assert bool((above >= 1).all())
    assert abs(float(above.mean()) - 2) < 0.1
    assert bool((below <= 0.5).all())
    assert abs(float(below.mean()) + 0.5) < 0.1


def test_discrete_draws_pick_only_legal_actions():
    spec = TicTacToe().spec
    mask = torch.rand(4_000, spec.num_actions, generator=torch.Generator().manual_seed(1)) < 0.3
    mask[:, 4] = True  # at least one legal action per row
    actions = _draw(spec, mask=mask)
    assert bool(mask.gather(1, actions[:, None]).all())
    assert len(actions.unique()) == spec.num_actions


def _fit_with_evaluation(tmp_path, env, **evaluation_kwargs):
    pl.seed_everything(0)
    module, datamodule = tiny_ppo(env=env, total_env_steps=64)
    evaluation = Evaluation(every_n_updates=1, **evaluation_kwargs)
    trainer(tmp_path, callbacks=[evaluation]).fit(module, datamodule)
    return evaluation.history[-1]


@pytest.mark.parametrize("cls", ["MultiDiscreteBandit", "MultiBinaryBandit"])
def test_random_baseline_of_multi_part_actions(tmp_path, cls):
    """The bandits assert every action is in their space, so an out-of-range draw fails the fit."""
    record = _fit_with_evaluation(
        tmp_path, GymnasiumEnv(env_class=ClassSpec(f"tests.space_envs.{cls}", {})), num_episodes=8
    )
    assert 0 <= record["eval/random_episode_return"] <= 1
    assert math.isfinite(record["eval/margin_over_random"])


def test_random_baseline_of_halfcheetah_under_clip_action_is_finite(tmp_path):
    """``ClipAction`` widens the action space to (-inf, inf): uniform draws over it were NaN actions."""
    env = GymnasiumEnv("HalfCheetah-v5", {"max_episode_steps": 30}, wrappers=[CLIP_ACTION])
    assert env.spec.action_low[0] == -math.inf
    record = _fit_with_evaluation(tmp_path, env, num_episodes=2)
    assert math.isfinite(record["eval/random_episode_return"])
    assert record["eval/random_episode_return"] != 0.0
    assert record["eval/episodes_cut"] == 0


def test_cut_episodes_are_counted_and_left_out_of_the_means_in_a_fit(tmp_path):
    seed, episodes, max_steps = 7, 6, 20
    record = _fit_with_evaluation(tmp_path, TwoFormEnv(), num_episodes=episodes, seed=seed, max_steps=max_steps)
    lengths = TwoFormEnv(evaluation=True).draw_lengths(episodes, torch.Generator().manual_seed(seed)).float()
    ended = lengths <= max_steps
    assert 0 < int(ended.sum()) < episodes
    assert record["eval/episodes_cut"] == int((~ended).sum())
    assert record["eval/episode_length"] == pytest.approx(float(lengths[ended].mean()))


def test_every_episode_cut_gives_nan_means_and_a_warning(tmp_path):
    with pytest.warns(UserWarning, match="every evaluation episode was cut at max_steps"):
        record = _fit_with_evaluation(tmp_path, TwoFormEnv(), num_episodes=3, max_steps=5)
    assert math.isnan(record["eval/episode_return"])
    assert record["eval/episodes_cut"] == 3


class RaisingCartPole(CartPole):
    """A CartPole whose every step raises."""

    def step_state(self, state, action, generator, inplace=False):
        raise RuntimeError("simulator crashed")


def test_a_raising_eval_env_leaves_the_module_in_training_mode():
    module, _ = tiny_ppo()
    module.train()
    evaluation = Evaluation(every_n_updates=1, num_episodes=2)
    fake_trainer = SimpleNamespace(state=SimpleNamespace(fn="fit"), is_global_zero=True)
    with pytest.raises(RuntimeError, match="simulator crashed"):
        evaluation._play(fake_trainer, module, RaisingCartPole(), seed=0, num_episodes=2)
    assert module.training
