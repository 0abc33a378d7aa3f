"""Atari: ALE ids from the CLI, the two presets on every backend (same observations), raw scores in evaluation.

Backend tests skip when ale-py (``[atari]``) or EnvPool (``[envpool]``) is absent; the one-line errors for a
missing package or an unknown preset run either way.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
import torch

from rl_lightning.envs.gymnasium.atari import PRESETS, named_preset
from rl_lightning.errors import ConfigError
from tests.test_env_gymnasium_cli import assert_one_line_error, gym_env, run_cli

HAS_ALE = importlib.util.find_spec("ale_py") is not None
HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None
needs_ale = pytest.mark.skipif(not HAS_ALE, reason='needs ale-py: pip install -e ".[atari]"')

BACKENDS = [
    pytest.param("GymnasiumEnv", {}, marks=needs_ale, id="in_process"),
    pytest.param("GymnasiumVectorEnv", {"mode": "sync"}, marks=needs_ale, id="gym_sync"),
    pytest.param("AleVectorEnv", {}, marks=needs_ale, id="ale_vector"),
    pytest.param("EnvPoolEnv", {}, marks=pytest.mark.skipif(not HAS_ENVPOOL, reason="needs envpool"), id="envpool"),
]


def make(backend: str, game: str, preset: str, **kwargs: object):
    import rl_lightning.envs as envs

    return getattr(envs, backend)(game, atari_preset=preset, **kwargs)


def play(env, steps: int, seed: int = 0, num: int = 2) -> dict[str, torch.Tensor]:
    """Random actions for ``steps`` steps; returns the stacked step outputs."""
    gen = torch.Generator().manual_seed(seed)
    state = env.reset_state(num, gen)
    outs = []
    for _ in range(steps):
        action = torch.randint(0, env.spec.num_actions, (num,), generator=gen)
        state, out = env.step_state(state, action, gen, inplace=True)
        outs.append(out)
    env.close()
    return torch.stack(outs).to_dict()


def test_unknown_preset_is_one_line() -> None:
    with pytest.raises(
        ConfigError, match=r"atari_preset='nature' is not an Atari preset; choose one of \['atari100k', 'baselines'"
    ):
        named_preset("nature")


def test_unknown_preset_from_the_cli(tmp_path) -> None:
    done = run_cli(tmp_path, gym_env("Breakout", atari_preset="nature"))
    assert_one_line_error(done, "atari_preset='nature'", "baselines", "machado")
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(HAS_ALE, reason="checks the error when ale-py is absent")
def test_ale_id_without_ale_py_names_the_extra(tmp_path) -> None:
    done = run_cli(tmp_path, gym_env("ALE/Breakout-v5"))
    assert_one_line_error(done, "env_id='ALE/Breakout-v5'", "ale-py", 'pip install -e ".[atari]"')


@needs_ale
def test_ale_id_runs_from_the_cli_without_imports(tmp_path) -> None:
    """``ALE/Breakout-v5`` in a YAML file: the CLI imports ale_py itself (RAM observations: the MLP policy)."""
    env = gym_env("ALE/Breakout-v5", env_kwargs={"obs_type": "ram", "max_episode_steps": 20})
    done = run_cli(tmp_path, env)
    assert done.returncode == 0, done.stderr[-3000:]


@needs_ale
def test_id_of_the_other_protocol_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"env_id='ALE/Breakout-v5' with atari_preset='baselines'"):
        make("GymnasiumEnv", "ALE/Breakout-v5", "baselines")
    with pytest.raises(ConfigError, match=r"env_kwargs sets \['repeat_action_probability'\]"):
        make("GymnasiumEnv", "Breakout", "machado", env_kwargs={"repeat_action_probability": 0.0})


@pytest.mark.parametrize(("backend", "kwargs"), BACKENDS)
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_observations_are_the_same_on_every_backend(backend: str, kwargs: dict, preset: str) -> None:
    env = make(backend, "Breakout", preset, **kwargs)
    shape = PRESETS[preset].obs_shape
    ((_, leaf),) = env.spec.obs_leaves()
    assert (tuple(leaf.shape), leaf.dtype) == (shape, torch.uint8)
    out = play(env, 40)
    assert out["obs"].shape == (40, 2, *shape)
    assert out["obs"].dtype == torch.uint8
    assert out["final_obs"].dtype == torch.uint8
    assert out["obs"].float().std() > 0  # real frames, not a blank buffer


def _frames(backend: str, kwargs: dict, preset: str, steps: int = 40) -> dict[str, torch.Tensor]:
    """One env, fixed actions (seeded), the preset made deterministic: no sticky actions, no no-ops, no FIRE."""
    env = make(backend, "Breakout", preset, **kwargs)
    gen, actions = torch.Generator().manual_seed(0), torch.Generator().manual_seed(5)
    state = env.reset_state(1, gen)
    first = env.observe(state)["obs"]
    outs = []
    for _ in range(steps):
        action = torch.randint(0, env.spec.num_actions, (1,), generator=actions)
        state, out = env.step_state(state, action, gen, inplace=True)
        outs.append(out)
    env.close()
    out = torch.stack(outs).to_dict()
    out["first"] = first
    return out


@needs_ale
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_same_frames_on_every_backend_where_the_simulators_agree(monkeypatch, preset: str) -> None:
    """Same actions, deterministic settings: the Gymnasium backends and ale-py's vector env give identical frames
    (ale-py's black stack padding at reset is replaced by the first frame, as Gymnasium and EnvPool do) up to the
    first life loss, after which the baselines wrappers take a no-op step that ale-py does not. EnvPool bundles its
    own ALE build: its frames differ in a few pixels (measured: at most 0.3% per run), never in shape or dtype.
    FIRE at reset is off here because the C++ backends press it differently from openai/baselines' FIRE-then-UP."""
    deterministic = dataclasses.replace(PRESETS[preset], sticky=0.0, noop_max=0, fire_reset=False)
    monkeypatch.setitem(PRESETS, preset, deterministic)
    ref = _frames("GymnasiumEnv", {}, preset)
    ends = torch.nonzero(ref["terminated"][:, 0] | ref["truncated"][:, 0])
    agree = int(ends[0, 0]) if len(ends) else len(ref["obs"])  # steps before the first life loss
    assert agree >= 10
    backends = [("GymnasiumVectorEnv", {"mode": "sync"}), ("AleVectorEnv", {})]
    for backend, kwargs in backends:
        out = _frames(backend, kwargs, preset)
        assert torch.equal(out["first"], ref["first"]), backend
        assert torch.equal(out["obs"][:agree], ref["obs"][:agree]), backend
        assert torch.equal(out["reward"][:agree], ref["reward"][:agree]), backend
        if agree < len(ref["obs"]):
            assert torch.equal(out["final_obs"][agree], ref["final_obs"][agree]), backend
    if HAS_ENVPOOL:
        out = _frames("EnvPoolEnv", {}, preset)
        assert out["obs"].shape == ref["obs"].shape
        differing = (out["obs"][:agree] != ref["obs"][:agree]).float().mean()
        assert differing < 0.01


@pytest.mark.parametrize(("backend", "kwargs"), BACKENDS)
def test_baselines_training_clips_and_ends_on_life_loss_evaluation_plays_whole_games(backend, kwargs) -> None:
    """SpaceInvaders pays 5-30 per kill: clipped to 1 in training, raw in the evaluation copy (``fresh``)."""
    train_env = make(backend, "SpaceInvaders", "baselines", **kwargs)
    eval_env = train_env.fresh()
    assert eval_env.atari.evaluation
    assert not train_env.atari.evaluation
    train, evaluation = play(train_env, 400), play(eval_env, 400)
    assert set(train["reward"].unique().tolist()) <= {0.0, 1.0}
    assert train["reward"].sum() > 0
    assert evaluation["reward"].max() > 1.0
    # 3 lives per game: training ends an episode at each life loss, evaluation only at game over
    assert train["terminated"].sum() >= 2
    assert train["terminated"].sum() > 2 * evaluation["terminated"].sum()


@pytest.mark.parametrize(("backend", "kwargs"), BACKENDS)
def test_same_seed_same_episodes(backend: str, kwargs: dict) -> None:
    first = play(make(backend, "Breakout", "baselines", **kwargs), 30, seed=3)
    again = play(make(backend, "Breakout", "baselines", **kwargs), 30, seed=3)
    other = play(make(backend, "Breakout", "baselines", **kwargs), 30, seed=4)
    assert torch.equal(first["obs"], again["obs"])
    assert not torch.equal(first["obs"], other["obs"])
