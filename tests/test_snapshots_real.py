"""GymnasiumEnv snapshots of real envs are the real state (issue 20 bug 1): MuJoCo, ALE (sticky actions and the
baselines preset's wrappers) and plain-Python envs; pooled copies without leaks; uncopyable envs refused."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium.utils import EzPickle

from rl_lightning import keys
from rl_lightning.envs import BatchedEnv, GymnasiumEnv
from rl_lightning.envs.gymnasium.wrappers import ClassSpec
from rl_lightning.errors import ConfigError
from tests.helpers import tiny_spo
from tests.my_envs import Corridor

pytest.importorskip("mujoco")
ale_py = pytest.importorskip("ale_py")

OUTPUTS = (keys.OBS, keys.FINAL_OBS, keys.REWARD, keys.TERMINATED, keys.TRUNCATED)

#: id, constructor arguments: short time limits so the compared steps cross episode ends (the baselines preset's
#: limit counts raw frames: 4 per agent step, no-op and FIRE resets included).
ENVS = {
    "CartPole-v1": {"env_id": "CartPole-v1", "env_kwargs": {"max_episode_steps": 15}},
    "Pendulum-v1": {"env_id": "Pendulum-v1", "env_kwargs": {"max_episode_steps": 20}},
    "HalfCheetah-v5": {"env_id": "HalfCheetah-v5", "env_kwargs": {"max_episode_steps": 20}},
    "Hopper-v5": {"env_id": "Hopper-v5", "env_kwargs": {"max_episode_steps": 40}},
    "ALE/Breakout-v5": {"env_id": "ALE/Breakout-v5", "env_kwargs": {"max_episode_steps": 25}},
    "Breakout-baselines": {"env_id": "Breakout", "env_kwargs": {"max_episode_steps": 120}, "atari_preset": "baselines"},
    "Breakout-machado": {"env_id": "Breakout", "env_kwargs": {"max_episode_steps": 100}, "atari_preset": "machado"},
}


def _actions(env: GymnasiumEnv, num: int, seed: int) -> list[torch.Tensor]:
    """``num`` uniform-random actions for one env, from a seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    spec = env.spec
    if spec.discrete:
        return [torch.randint(spec.num_actions, (1,), generator=gen) for _ in range(num)]
    low, high = torch.tensor(spec.action_low), torch.tensor(spec.action_high)
    return [(low + (high - low) * torch.rand(low.shape, generator=gen)).unsqueeze(0) for _ in range(num)]


def _ale(env: GymnasiumEnv, state: Any) -> tuple[int, int] | None:
    """(episode frame number, lives) of an ALE env's emulator, None for other envs."""
    inner = env._env(int(state["snapshot"][0])).unwrapped
    return (inner.ale.getEpisodeFrameNumber(), inner.ale.lives()) if hasattr(inner, "ale") else None


def _step(env: GymnasiumEnv, state: Any, action: torch.Tensor) -> tuple[Any, Any]:
    return env.step_state(state, action, torch.Generator(), inplace=True)


def _assert_same(out_a: Any, out_b: Any, where: str) -> None:
    for key in OUTPUTS:  # numpy: torch.equal on a uint8 frame takes milliseconds on a loaded CPU
        assert np.array_equal(out_a[key].numpy(), out_b[key].numpy()), f"{key} differs {where}"


@pytest.mark.parametrize("name", list(ENVS))
def test_a_snapshot_steps_exactly_like_the_live_env(name: str) -> None:
    env = GymnasiumEnv(**ENVS[name])
    live = env.reset_state(1, torch.Generator().manual_seed(3))
    for action in _actions(env, 12, seed=1):
        live, _ = _step(env, live, action)
    # A released copy that went elsewhere is what the next snapshot reuses (pooled kinds): a dirty target.
    detour = env.snapshot(live)
    for action in _actions(env, 7, seed=2):
        detour, _ = _step(env, detour, action)
    env.release(detour)
    snap = env.snapshot(live)
    assert _ale(env, snap) == _ale(env, live)
    ends = 0
    for t, action in enumerate(_actions(env, 60, seed=4)):
        live, out_live = _step(env, live, action)
        snap, out_snap = _step(env, snap, action)
        _assert_same(out_live, out_snap, f"at step {t} after the snapshot")
        assert _ale(env, snap) == _ale(env, live), f"ALE frame number / lives differ at step {t}"
        ends += int(out_live[keys.TERMINATED] | out_live[keys.TRUNCATED])
    assert ends >= 1, "the compared steps must cross an episode end"
    env.release(snap)
    others = _actions(env, 20, seed=6)
    for t, action in enumerate(_actions(env, 20, seed=5)):  # a snapshot at every step, stepped once
        detour, _ = env.step_state(env.snapshot(live), others[t], torch.Generator(), inplace=True)
        env.release(detour)  # the next snapshot reuses this env object, which went elsewhere
        snap = env.snapshot(live)
        live, out_live = _step(env, live, action)
        snap, out_snap = _step(env, snap, action)
        _assert_same(out_live, out_snap, f"stepping a snapshot taken at step {t}")
        env.release(snap)
    assert env.live_count == 1
    env.close()


@pytest.mark.parametrize("name", ["HalfCheetah-v5", "ALE/Breakout-v5"])
def test_a_snapshot_of_a_snapshot_and_one_snapshot_stepped_twice(name: str) -> None:
    env = GymnasiumEnv(**ENVS[name])
    live = env.reset_state(1, torch.Generator().manual_seed(5))
    for action in _actions(env, 10, seed=6):
        live, _ = _step(env, live, action)
    first = env.snapshot(live)
    second = env.snapshot(first)
    actions = _actions(env, 30, seed=7)
    # Stepping the same snapshot twice (not in place) gives the same branch both times.
    branch_a, branch_b = first, first
    for t, action in enumerate(actions):
        next_a, out_a = env.step_state(branch_a, action, torch.Generator())
        next_b, out_b = env.step_state(branch_b, action, torch.Generator())
        _assert_same(out_a, out_b, f"between two steps of one snapshot at step {t}")
        for old in {int(branch_a["snapshot"][0]), int(branch_b["snapshot"][0])} - {int(first["snapshot"][0])}:
            env.release(env._state([old], None))
        branch_a, branch_b = next_a, next_b
    assert env.live_count == 5  # live, first, second, and the two branch ends
    env.release(branch_a)
    env.release(branch_b)
    for t, action in enumerate(actions):  # the copy of the copy follows the copy
        first, out_first = _step(env, first, action)
        second, out_second = _step(env, second, action)
        _assert_same(out_first, out_second, f"between a snapshot and its snapshot at step {t}")
    env.close()


def test_released_copies_are_reused_and_nothing_leaks() -> None:
    env = GymnasiumEnv("HalfCheetah-v5")
    live = env.reset_state(2, torch.Generator().manual_seed(0))
    snaps = [env.snapshot(live) for _ in range(3)]
    objects = {id(env._env(sid)) for snap in snaps for sid in snap["snapshot"].tolist()}
    assert env.live_count == 8  # live = held by callers
    for snap in snaps:
        env.release(snap)
        env.release(snap)  # double release is harmless
    assert env.live_count == 2
    again = env.snapshot(live)
    assert {id(env._env(sid)) for sid in again["snapshot"].tolist()} <= objects  # taken from the pool
    child, _ = env.step_state(again, torch.zeros(2, 6), torch.Generator())
    assert env.live_count == 6
    env.release(child)
    env.release(again)
    assert env.live_count == 2
    closed = []
    for pooled in env._copier._free:
        pooled.close = lambda pooled=pooled, close=pooled.close: (closed.append(pooled), close())
    assert len(env._copier._free) == 6  # the most copies ever held at once: no env object built beyond that
    env.close()
    assert env.live_count == 0
    assert len(closed) == 6  # close closes the pool too
    assert not env._copier._free


class EzCorridor(Corridor, EzPickle):
    """A user's env on ``EzPickle``: its copies are rebuilt from the constructor arguments, so it cannot snapshot."""

    def __init__(self, length: int = 6, step_cost: float = 0.01) -> None:
        Corridor.__init__(self, length, step_cost)
        EzPickle.__init__(self, length, step_cost)


def _uncopyable() -> GymnasiumEnv:
    return GymnasiumEnv(env_class=ClassSpec("tests.test_snapshots_real.EzCorridor", {"length": 4}))


def _one_line_error(call: Any) -> str:
    with pytest.raises(ConfigError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


def test_an_uncopyable_env_cannot_snapshot_and_says_why() -> None:
    env = _uncopyable()
    assert not env.can_snapshot
    assert GymnasiumEnv("HalfCheetah-v5").can_snapshot
    assert GymnasiumEnv("ALE/Breakout-v5").can_snapshot
    state = env.reset_state(2, torch.Generator().manual_seed(0))
    state, _ = env.step_state(state, torch.ones(2, dtype=torch.int64), torch.Generator(), inplace=True)  # PPO's use
    for call in (lambda: env.snapshot(state), lambda: env.step_state(state, torch.ones(2, dtype=torch.int64),
                                                                     torch.Generator())):  # fmt: skip
        message = _one_line_error(call)
        assert "GymnasiumEnv('EzCorridor') cannot copy its env's state: EzCorridor is an EzPickle env" in message
        assert "plain-Python envs, Gymnasium's MuJoCo envs and ALE Atari envs" in message
    assert env.live_count == 2
    env.close()


def test_spo_and_policy_search_refuse_an_uncopyable_env() -> None:
    from rl_lightning.inference import Policy

    env = _uncopyable()
    module, _ = tiny_spo(env=env, num_envs=1)
    spo = _one_line_error(lambda: module.check_config(SimpleNamespace(env=env)))
    assert spo.startswith("data.env: SPO searches on env snapshots, and GymnasiumEnv('EzCorridor') cannot copy")
    batched = BatchedEnv(env, 1, seed=0)
    batched.reset()
    search = _one_line_error(lambda: Policy(module).search(batched))
    assert search.startswith("policy.search steps snapshots of the env, and GymnasiumEnv('EzCorridor') cannot copy")
    env.close()


def test_sticky_atari_copies_hold_the_source_action() -> None:
    """ALE keeps the sticky action outside its cloned state: copies must still repeat the source's last action."""
    env = GymnasiumEnv("ALE/Breakout-v5")
    live = env.reset_state(1, torch.Generator().manual_seed(11))
    for _ in range(8):
        live, _ = _step(env, live, torch.tensor([3]))  # LEFT: ALE now holds LEFT
    held = env._env(int(live["snapshot"][0])).unwrapped.ale.held
    assert held == (ale_py.Action.LEFT, 1.0)
    snap = env.snapshot(live)
    assert env._env(int(snap["snapshot"][0])).unwrapped.ale.held == held
    for t in range(10):  # NOOP: each frame repeats the held LEFT with probability 0.25
        live, out_live = _step(env, live, torch.tensor([0]))
        snap, out_snap = _step(env, snap, torch.tensor([0]))
        _assert_same(out_live, out_snap, f"at NOOP step {t}")
    env.close()
