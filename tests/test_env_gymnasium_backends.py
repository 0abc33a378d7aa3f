"""One contract for every Gymnasium backend: the same seeded envs give identical transitions on each.

In-process, ``SyncVectorEnv`` and ``AsyncVectorEnv`` run the same Gymnasium simulators from the same
per-env seeds and must agree exactly. EnvPool runs its own C++ simulators with its own random streams, so its
episodes differ from Gymnasium's; it is checked against the contract, for determinism, and for dynamics
that match Gymnasium's from the same state.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs import BatchedEnv, ClassSpec, GymnasiumEnv, GymnasiumVectorEnv
from rl_lightning.errors import ConfigError

BACKENDS = {
    "in_process": lambda **kw: GymnasiumEnv(**kw),
    "sync": lambda **kw: GymnasiumVectorEnv(**kw, mode="sync"),
    "async": lambda **kw: GymnasiumVectorEnv(**kw, mode="async"),
}

CASES = {
    "cartpole": {"env_id": "CartPole-v1", "env_kwargs": {"max_episode_steps": 12}},
    "pendulum": {"env_id": "Pendulum-v1", "env_kwargs": {"max_episode_steps": 7}},
    "corridor_class": {
        "env_class": ClassSpec("tests.my_envs.Corridor", {"length": 4}),
        "wrappers": [ClassSpec("gymnasium.wrappers.TimeLimit", {"max_episode_steps": 5})],
    },
}

STEPS = 30
NUM_ENVS = 3


def actions_for(spec, steps: int, seed: int = 3) -> list[torch.Tensor]:
    """Seeded actions; continuous ones reach 2× past the bounds so that clipping is exercised."""
    gen = torch.Generator().manual_seed(seed)
    if spec.discrete:
        out = [torch.randint(0, spec.num_actions, (NUM_ENVS,), generator=gen) for _ in range(steps)]
        return [torch.cat([torch.ones(1, dtype=torch.int64), a[1:]]) for a in out]  # env 0 always pushes right
    high = torch.tensor(spec.action_high)
    return [(torch.rand(NUM_ENVS, *spec.action_shape, generator=gen) * 4 - 2) * high for _ in range(steps)]


def rollout(core, steps: int = STEPS, seed: int = 7) -> list[TensorDict]:
    env = BatchedEnv(core, NUM_ENVS, seed=seed)
    outs = [env.reset()]
    try:
        outs += [env.step(action) for action in actions_for(core.spec, steps)]
    finally:
        env.close()
    return outs


def check_contract(outs: list[TensorDict]) -> None:
    """Same-step autoreset: flags apart, ``is_first`` on done rows, ``final_obs`` = ``obs`` elsewhere."""
    assert outs[0][keys.IS_FIRST].all()
    for out in outs[1:]:
        done = out[keys.TERMINATED] | out[keys.TRUNCATED]
        assert torch.equal(out[keys.IS_FIRST], done)
        assert torch.equal(out[keys.OBS][~done], out[keys.FINAL_OBS][~done])
        for key, dtype in [(keys.OBS, torch.float32), (keys.REWARD, torch.float32), (keys.TERMINATED, torch.bool)]:
            assert out[key].dtype == dtype


@pytest.fixture(scope="module")
def references() -> dict[str, list[TensorDict]]:
    return {name: rollout(GymnasiumEnv(**case)) for name, case in CASES.items()}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_backends_give_identical_transitions(backend: str, case: str, references) -> None:
    core = BACKENDS[backend](**CASES[case])
    reference = references[case]
    assert core.spec == GymnasiumEnv(**CASES[case]).spec
    outs = rollout(core)
    check_contract(outs)
    for t, (out, ref) in enumerate(zip(outs, reference, strict=True)):
        assert set(out.keys()) == set(ref.keys()), t
        for key in ref.keys():  # noqa: SIM118 - TensorDict keys
            assert torch.equal(out[key], ref[key]), (backend, case, t, key)


def test_reference_rollouts_hold_terminations_truncations_and_distinct_seeds(references) -> None:
    """The comparison above would be weak if nothing ever ended or every env started alike."""
    for name, outs in references.items():
        truncated = torch.stack([o[keys.TRUNCATED] for o in outs[1:]])
        assert truncated.any(), name
        assert not torch.equal(outs[0][keys.OBS][0], outs[0][keys.OBS][1]), name
    for name in ("cartpole", "corridor_class"):
        assert torch.stack([o[keys.TERMINATED] for o in references[name][1:]]).any(), name


def test_different_run_seed_gives_different_episodes() -> None:
    core = GymnasiumVectorEnv(**CASES["cartpole"])
    assert not torch.equal(rollout(core, 3, seed=7)[0][keys.OBS], rollout(core, 3, seed=8)[0][keys.OBS])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_backends_cannot_snapshot_and_copy_unstarted(mode: str) -> None:
    core = GymnasiumVectorEnv("CartPole-v1", mode=mode)
    assert not core.can_snapshot
    assert GymnasiumEnv("CartPole-v1").can_snapshot
    state = core.reset_state(2, torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError, match="cannot snapshot.*GymnasiumEnv"):
        core.step_state(state, torch.zeros(2, dtype=torch.int64), torch.Generator(), inplace=False)
    twin = copy.deepcopy(core)  # what the Evaluation callback does with the training env
    assert twin._venv is None
    assert core._venv is not None
    with pytest.raises(RuntimeError, match="reset_state first"):
        twin.observe(state)
    twin_state = twin.reset_state(2, torch.Generator().manual_seed(0))
    assert torch.equal(twin.observe(twin_state)[keys.OBS], core.observe(state)[keys.OBS])
    twin.close()
    core.close()


def test_unknown_vector_mode_is_one_line() -> None:
    with pytest.raises(ConfigError, match="mode='threads'.*'sync', 'async'"):
        GymnasiumVectorEnv("CartPole-v1", mode="threads")


# ----- EnvPool (optional extra) ------------------------------------------------------------------------------


def test_envpool_follows_the_contract_and_is_deterministic() -> None:
    pytest.importorskip("envpool")
    from rl_lightning.envs import EnvPoolEnv

    core = EnvPoolEnv("CartPole-v1", {"max_episode_steps": 12})
    assert not core.can_snapshot
    assert core.spec == GymnasiumEnv(**CASES["cartpole"]).spec
    outs = rollout(core)
    check_contract(outs)
    assert torch.stack([o[keys.TRUNCATED] for o in outs[1:]]).any()
    assert torch.stack([o[keys.TERMINATED] for o in outs[1:]]).any()
    again = rollout(EnvPoolEnv("CartPole-v1", {"max_episode_steps": 12}))
    for out, ref in zip(outs, again, strict=True):
        assert (out == ref).all()
    for out in outs[1:]:  # reset observations are fresh starts (|x| <= 0.05), never the terminal state
        done = out[keys.IS_FIRST]
        assert (out[keys.OBS][done].abs() <= 0.05).all()


def test_envpool_dynamics_match_gymnasium_from_the_same_state() -> None:
    """EnvPool's own seeds give other starts than Gymnasium's; from one state both simulators agree."""
    pytest.importorskip("envpool")
    import gymnasium

    from rl_lightning.envs import EnvPoolEnv

    core = EnvPoolEnv("CartPole-v1")
    outs = rollout(core, steps=8)
    actions = actions_for(core.spec, 8)
    reference = gymnasium.make("CartPole-v1").unwrapped
    reference.reset(seed=0)
    for t, out in enumerate(outs[1:]):
        before = outs[t][keys.OBS]
        for row in range(NUM_ENVS):
            reference.state = before[row].double().numpy()
            obs, _, terminated, _, _ = reference.step(int(actions[t][row]))
            np.testing.assert_allclose(out[keys.FINAL_OBS][row].numpy(), obs, atol=1e-5)
            assert bool(out[keys.TERMINATED][row]) == terminated


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_mujoco_halfcheetah_is_identical_through_the_vector_backends(mode: str) -> None:
    """MuJoCo (the ``[mujoco]`` extra) steps deterministically: the vector backends match in-process exactly."""
    pytest.importorskip("mujoco")
    case = {"env_id": "HalfCheetah-v5", "env_kwargs": {"max_episode_steps": 6}}
    outs, reference = rollout(GymnasiumVectorEnv(**case, mode=mode), 8), rollout(GymnasiumEnv(**case), 8)
    assert outs[0][keys.OBS].shape == (NUM_ENVS, 17)
    assert outs[6][keys.TRUNCATED].all()
    for out, ref in zip(outs, reference, strict=True):
        assert (out == ref).all()
