"""Wrappers from the config, custom env classes and plugin env ids, on every backend."""

from __future__ import annotations

import pytest
import torch

from rl_lightning import keys
from rl_lightning.envs import BatchedEnv, ClassSpec, GymnasiumEnv, GymnasiumVectorEnv
from rl_lightning.errors import ConfigError

BACKENDS = {
    "in_process": lambda **kw: GymnasiumEnv(**kw),
    "sync": lambda **kw: GymnasiumVectorEnv(**kw, mode="sync"),
    "async": lambda **kw: GymnasiumVectorEnv(**kw, mode="async"),
}


def envpool_backend(**kw):
    pytest.importorskip("envpool")
    from rl_lightning.envs import EnvPoolEnv

    return EnvPoolEnv(**kw)


def steps(core, actions: list[torch.Tensor], seed: int = 5) -> list:
    env = BatchedEnv(core, actions[0].shape[0], seed=seed)
    try:
        return [env.reset(), *(env.step(a) for a in actions)]
    finally:
        env.close()


RESCALE = ClassSpec("gymnasium.wrappers.RescaleAction", {"min_action": -1.0, "max_action": 1.0})
CLIP = ClassSpec("gymnasium.wrappers.ClipAction")


# Gymnasium's own ClipAction builds its ±inf Box from float64 bounds and warns about the cast; not ours to fix.
@pytest.mark.filterwarnings("ignore:.*precision lowered by casting to float32:UserWarning")
@pytest.mark.parametrize("backend", [*BACKENDS, "envpool"])
def test_rescale_and_clip_action_map_onto_the_raw_env(backend: str) -> None:
    make = envpool_backend if backend == "envpool" else BACKENDS[backend]
    rescaled = make(env_id="Pendulum-v1", wrappers=[RESCALE])
    assert (rescaled.spec.action_low, rescaled.spec.action_high) == ((-1.0,), (1.0,))
    clipped = make(env_id="Pendulum-v1", wrappers=[RESCALE, CLIP])  # Gymnasium's ClipAction accepts any value
    assert (clipped.spec.action_low, clipped.spec.action_high) == ((-float("inf"),), (float("inf"),))
    raw = make(env_id="Pendulum-v1")
    assert (raw.spec.action_low, raw.spec.action_high) == ((-2.0,), (2.0,))
    actions = [torch.tensor([[0.5], [3.0]])] * 3
    raw_actions = [torch.tensor([[1.0], [2.0]])] * 3  # 0.5 of [-1, 1] is 1.0 of [-2, 2]; 3.0 clips to 1 → 2.0
    reference = steps(raw, raw_actions)
    for core in (rescaled, clipped):
        for out, ref in zip(steps(core, actions), reference, strict=True):
            assert (out == ref).all()


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_time_limit_and_a_users_own_wrapper_in_order(backend: str) -> None:
    limit = ClassSpec("gymnasium.wrappers.TimeLimit", {"max_episode_steps": 4})
    time_aware = ClassSpec("gymnasium.wrappers.TimeAwareObservation")  # appends the step count
    scale = ClassSpec("tests.my_envs.ScaleObservation", {"scale": 10.0})
    core = BACKENDS[backend](env_id="CartPole-v1", wrappers=[limit, time_aware, scale])
    swapped = BACKENDS[backend](env_id="CartPole-v1", wrappers=[limit, scale, time_aware])  # these two do not commute
    assert core.spec.max_episode_steps == 4
    alternate = [torch.tensor([t % 2, (t + 1) % 2]) for t in range(4)]
    outs, swapped_outs = steps(core, alternate), steps(swapped, alternate)
    refs = steps(GymnasiumEnv("CartPole-v1"), alternate)
    assert [bool(o[keys.TRUNCATED].all()) for o in outs[1:]] == [False, False, False, True]
    for out in (outs, swapped_outs):
        torch.testing.assert_close(out[1][keys.OBS][:, :4].float(), refs[1][keys.OBS] * 10.0)  # float64 after it
    assert outs[1][keys.OBS][:, 4].tolist() == [10.0, 10.0]  # step 1, scaled: the scale wraps the time-aware one
    assert swapped_outs[1][keys.OBS][:, 4].tolist() == [1.0, 1.0]  # applied first, the scale leaves the time alone


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_filter_observation_on_a_dict_env_class(backend: str) -> None:
    wrappers = [
        ClassSpec("gymnasium.wrappers.FilterObservation", {"filter_keys": ["goal", "position"]}),
        ClassSpec("gymnasium.wrappers.FlattenObservation"),
        ClassSpec("gymnasium.wrappers.TimeLimit", {"max_episode_steps": 6}),
    ]
    core = BACKENDS[backend](env_class=ClassSpec("tests.my_envs.GoalCorridor", {"length": 3}), wrappers=wrappers)
    assert core.spec.obs_shape == (2,)
    outs = steps(core, [torch.ones(2, dtype=torch.int64)] * 3)
    assert (outs[0][keys.OBS][:, 0] == 1.0).all()  # Dict keys flatten in sorted order: goal, position
    assert torch.stack([o[keys.TERMINATED] for o in outs[1:]]).any()


def test_without_the_filter_a_dict_space_is_carried_as_nested_keys() -> None:
    core = GymnasiumEnv(env_class=ClassSpec("tests.my_envs.GoalCorridor"))
    assert [key for key, _ in core.spec.obs_keys] == [("goal",), ("noise",), ("position",)]
    obs = steps(core, [torch.ones(2, dtype=torch.int64)])[0][keys.OBS]
    assert sorted(obs.keys()) == ["goal", "noise", "position"]
    assert obs["position"].shape == (2, 1)


BAD_WRAPPERS = [
    (ClassSpec("gymnasium.wrappers.NoSuchWrapper"), "does not import"),
    (ClassSpec("gymnasium.wrappers.NormalizeObservation"), "not saved in checkpoints.*normalize_obs: true"),
    (ClassSpec("gymnasium.wrappers.NormalizeReward", {"gamma": 0.9}), "not saved in checkpoints.*normalize_reward"),
    (ClassSpec("no_such_package.Wrapper"), "does not import"),
    (ClassSpec("tests.my_envs.Corridor"), "is not a gymnasium.core.Wrapper subclass"),
    (ClassSpec("gymnasium.wrappers.TimeLimit", {"max_steps": 3}), "fix its init_args"),
    (ClassSpec("gymnasium.wrappers.RescaleAction", {"min_action": 0, "max_action": 1}), "fix its init_args"),
]


@pytest.mark.parametrize(("spec", "message"), BAD_WRAPPERS, ids=[s.class_path for s, _ in BAD_WRAPPERS])
def test_bad_wrapper_is_one_line_naming_it(spec: ClassSpec, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        GymnasiumEnv("CartPole-v1", wrappers=[spec])  # RescaleAction on Discrete actions fails too
    assert "wrappers[0]" in str(err.value)
    assert "\n" not in str(err.value)


def test_envpool_refuses_wrappers_it_cannot_apply() -> None:
    with pytest.raises(ConfigError, match="max_episode_steps in env_kwargs"):
        envpool_backend(
            env_id="CartPole-v1", wrappers=[ClassSpec("gymnasium.wrappers.TimeLimit", {"max_episode_steps": 3})]
        )


def test_env_class_arguments_and_errors() -> None:
    core = GymnasiumEnv(env_class=ClassSpec("tests.my_envs.Corridor", {"length": 9}))
    assert core.spec.name == "Corridor"
    assert core.spec.max_episode_steps == 0  # no TimeLimit unless the config adds one
    with pytest.raises(ConfigError, match="env_class: tests.my_envs.Corridor.*width"):
        GymnasiumEnv(env_class=ClassSpec("tests.my_envs.Corridor", {"width": 9}))
    with pytest.raises(ConfigError, match="not a gymnasium.core.Env subclass"):
        GymnasiumEnv(env_class=ClassSpec("collections.OrderedDict"))
    with pytest.raises(ConfigError, match="is a wrapper; list it under wrappers"):
        GymnasiumEnv(env_class=ClassSpec("tests.my_envs.ScaleObservation"))
    with pytest.raises(ConfigError, match="give exactly one"):
        GymnasiumEnv("CartPole-v1", env_class=ClassSpec("tests.my_envs.Corridor"))
    with pytest.raises(ConfigError, match="env_kwargs=.*gymnasium.make"):
        GymnasiumEnv("CartPole-v1", {"no_such_kwarg": 1})


def test_missing_simulator_package_names_the_extra(monkeypatch) -> None:
    """An env family whose package is missing (MuJoCo here) is one ConfigError naming this package's extra."""
    import gymnasium

    def make(*_, **__):
        raise gymnasium.error.DependencyNotInstalled('MuJoCo is not installed, run `pip install "gymnasium[mujoco]"`')

    monkeypatch.setattr(gymnasium, "make", make)
    with pytest.raises(ConfigError, match=r'env_id=.Pendulum-v1. needs a package.*pip install -e "\.\[mujoco\]"'):
        GymnasiumEnv(env_id="Pendulum-v1")
