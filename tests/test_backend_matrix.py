"""Backend x env family: every Gymnasium backend on every env family it can host, under one contract (issue 20).

The families are the ones users bring: classic control, MuJoCo (a terminating one, Hopper-v5), ALE (Breakout under
the ``baselines`` preset), a ``Dict`` observation and ``MultiDiscrete`` actions. The backends: in-process, Gymnasium
sync and async vector envs, EnvPool, ale-py's ``AtariVectorEnv``. A cell that cannot exist (EnvPool hosts only its
own C++ tasks; ``AleVectorEnv`` only Atari) is left out of the table, not skipped. Each cell checks:

* the step contract: shapes and dtypes per the spec (``uint8`` pixels stay ``uint8``), same-step autoreset
  (``is_first`` exactly on finished rows, ``final_obs`` = ``obs`` elsewhere), actions drawn from the env's own space;
* snapshots: where ``can_snapshot``, a snapshot continues exactly as the live env does (with the same actions, across
  an episode end); elsewhere stepping a copy is refused with one line;
* the evaluation form: ``fresh()`` of an Atari preset plays whole games with raw rewards, the others are unchanged.

Fits of each algorithm on MuJoCo and on ALE, as a user runs them, are in ``test_backend_matrix_fits.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs import AleVectorEnv, BatchedEnv, ClassSpec, EnvPoolEnv, GymnasiumEnv, GymnasiumVectorEnv

pytest.importorskip("mujoco")
pytest.importorskip("ale_py")
pytest.importorskip("envpool")

NUM_ENVS = 2
STEPS = 40

FAMILIES = {
    "classic": {"env_id": "CartPole-v1", "env_kwargs": {"max_episode_steps": 15}},
    "mujoco": {"env_id": "Hopper-v5", "env_kwargs": {"max_episode_steps": 15}},
    "ale": {"env_id": "Breakout", "atari_preset": "baselines"},
    "dict": {"env_class": ClassSpec("tests.space_envs.TwoKeyDict", {"length": 6})},
    "multi_discrete": {"env_class": ClassSpec("tests.space_envs.MultiDiscreteBandit", {})},
}

BACKENDS = {
    "in_process": lambda **kw: GymnasiumEnv(**kw),
    "sync": lambda **kw: GymnasiumVectorEnv(**kw, mode="sync"),
    "async": lambda **kw: GymnasiumVectorEnv(**kw, mode="async"),
    "envpool": lambda **kw: EnvPoolEnv(**kw),
    "ale_vector": lambda **kw: AleVectorEnv(kw["env_id"], atari_preset=kw["atari_preset"]),
}

HOSTS = {  # backend -> the families it can host
    "in_process": list(FAMILIES),
    "sync": list(FAMILIES),
    "async": list(FAMILIES),
    "envpool": ["classic", "mujoco", "ale"],
    "ale_vector": ["ale"],
}
CELLS = [pytest.param(b, f, id=f"{b}-{f}") for b, fams in HOSTS.items() for f in fams]


def make(backend: str, family: str):
    return BACKENDS[backend](**FAMILIES[family])


def space_actions(core, steps: int, seed: int = 0) -> list[torch.Tensor]:
    """Seeded actions drawn from the env's own Gymnasium action space (a batch of ``NUM_ENVS`` per step)."""
    space = core._action_space
    space.seed(seed)
    out = []
    for _ in range(steps):
        batch = np.stack([np.asarray(space.sample()) for _ in range(NUM_ENVS)])
        out.append(torch.as_tensor(batch).to(torch.int64 if core.spec.action_kind != "box" else torch.float32))
    return out


def leaves(td: TensorDict, key: str) -> list[torch.Tensor]:
    value = td[key]
    if isinstance(value, TensorDict):
        return [value[k] for k in value.keys(include_nested=True, leaves_only=True)]
    return [value]


def check_step_contract(core, outs: list[TensorDict]) -> None:
    spec = core.spec
    expected = dict(spec.obs_leaves())
    assert outs[0][keys.IS_FIRST].all()
    for out in outs[1:]:
        done = out[keys.TERMINATED] | out[keys.TRUNCATED]
        assert torch.equal(out[keys.IS_FIRST], done)
        assert out[keys.REWARD].dtype == torch.float32
        assert out[keys.REWARD].shape == (NUM_ENVS,)
        for leaf_key, leaf in expected.items():
            obs = out[(keys.OBS, *leaf_key)] if leaf_key else out[keys.OBS]
            final = out[(keys.FINAL_OBS, *leaf_key)] if leaf_key else out[keys.FINAL_OBS]
            assert obs.dtype == leaf.dtype
            assert tuple(obs.shape) == (NUM_ENVS, *leaf.shape)
            assert torch.equal(obs[~done], final[~done])


@pytest.mark.parametrize(("backend", "family"), CELLS)
def test_contract(backend: str, family: str) -> None:
    core = make(backend, family)
    env = BatchedEnv(core, NUM_ENVS, seed=3)
    try:
        outs = [env.reset()]
        outs += [env.step(a) for a in space_actions(core, STEPS)]
    finally:
        env.close()
    check_step_contract(core, outs)
    if family != "ale":  # every non-Atari family here ends an episode within STEPS
        assert any(bool((o[keys.TERMINATED] | o[keys.TRUNCATED]).any()) for o in outs[1:])


def _same(a: TensorDict, b: TensorDict) -> bool:
    keys_ = [keys.OBS, keys.FINAL_OBS, keys.REWARD, keys.TERMINATED, keys.TRUNCATED, keys.IS_FIRST]
    return all(torch.equal(x, y) for k in keys_ for x, y in zip(leaves(a, k), leaves(b, k), strict=True))


@pytest.mark.parametrize(("backend", "family"), CELLS)
def test_snapshot_is_the_real_state_or_refused(backend: str, family: str) -> None:
    core = make(backend, family)
    env = BatchedEnv(core, NUM_ENVS, seed=5)
    actions = space_actions(core, 2 * STEPS, seed=1)
    try:
        env.reset()
        for a in actions[:STEPS // 2]:
            env.step(a)
        if not core.can_snapshot:
            with pytest.raises(Exception, match="snapshot") as err:
                core.step_state(env.state, actions[0], env.generator, inplace=False)
            assert "\n" not in str(err.value)
            return
        copy_state = core.snapshot(env.state)
        ended = False
        try:
            for a in actions[STEPS // 2:]:
                copy_state, copied = core.step_state(copy_state, a, env.generator, inplace=True)
                live = env.step(a)
                assert _same(copied, live), f"{backend}/{family}: the snapshot diverged from the live env"
                ended |= bool((live[keys.TERMINATED] | live[keys.TRUNCATED]).any())
        finally:
            core.release(copy_state)
    finally:
        env.close()
    if family != "ale":
        assert ended, "the comparison should cross an episode end"


@pytest.mark.parametrize(("backend", "family"), CELLS)
def test_evaluation_form(backend: str, family: str) -> None:
    core = make(backend, family)
    evaluation = core.fresh()
    try:
        if family == "ale":
            assert core.atari.life_loss
            assert core.atari.clip_reward
            assert not core.atari.evaluation
            assert evaluation.atari.evaluation
            assert not evaluation.atari.life_loss
        else:
            assert getattr(evaluation, "atari", None) is None
            assert evaluation.spec == core.spec
    finally:
        evaluation.close()
        core.close()


def test_every_family_is_stepped_by_at_least_two_backends() -> None:
    """The table itself: no family may be covered by a single backend (the bugs hid where only one stepped)."""
    for family in FAMILIES:
        assert sum(family in fams for fams in HOSTS.values()) >= 2, family
