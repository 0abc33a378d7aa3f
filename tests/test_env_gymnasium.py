"""GymnasiumEnv: specs, id validation, functional snapshots, registry accounting, auto-reset semantics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs import BatchedEnv, CartPole, GymnasiumEnv


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_specs_follow_the_spaces() -> None:
    cart = GymnasiumEnv("CartPole-v1")
    assert cart.spec.discrete
    assert cart.spec.num_actions == 2
    assert cart.spec.obs_shape == (4,)
    assert cart.spec.max_episode_steps == 500
    assert not cart.spec.has_action_mask
    pend = GymnasiumEnv("Pendulum-v1", {"g": 9.81})
    assert not pend.spec.discrete
    assert pend.spec.action_shape == (1,)
    assert pend.spec.obs_shape == (3,)
    assert pend.spec.action_low == (-2.0,)
    assert pend.spec.action_high == (2.0,)
    assert pend.spec.max_episode_steps == 200
    assert GymnasiumEnv("CartPole-v1", {"max_episode_steps": 7}).spec.max_episode_steps == 7
    assert cart.live_count == 0
    assert pend.live_count == 0


def test_unknown_id_names_it_and_suggests() -> None:
    with pytest.raises(ValueError, match="CartPol-v1") as err:
        GymnasiumEnv("CartPol-v1")
    assert "'CartPole-v1'" in str(err.value)
    assert "\n" not in str(err.value)


def test_unsupported_space_lists_the_supported_ones() -> None:
    with pytest.raises(ValueError, match=r"Tuple.*supported: Box \(any dtype\), Discrete, and Dict"):
        GymnasiumEnv("Blackjack-v1")


def test_reset_step_shapes_dtypes_and_seeding() -> None:
    env = GymnasiumEnv("Pendulum-v1")
    state = env.reset_state(3, _gen(1))
    assert state["snapshot"].dtype == torch.int64
    assert env.live_count == 3
    obs = env.observe(state)[keys.OBS]
    assert obs.shape == (3, 3)
    assert obs.dtype == torch.float32
    assert not torch.equal(obs[0], obs[1])  # each env seeded differently
    again = env.reset_state(3, _gen(1))
    assert torch.equal(env.observe(again)[keys.OBS], obs)  # seeds come from the torch generator
    _, out = env.step_state(state, torch.zeros(3, 1), _gen(), inplace=True)
    for key, dtype in [
        (keys.OBS, torch.float32),
        (keys.FINAL_OBS, torch.float32),
        (keys.REWARD, torch.float32),
        (keys.TERMINATED, torch.bool),
        (keys.TRUNCATED, torch.bool),
        (keys.IS_FIRST, torch.bool),
    ]:
        assert out[key].dtype == dtype, key
    env.close()


def test_stepping_a_snapshot_is_functional() -> None:
    env = GymnasiumEnv("CartPole-v1")
    state = env.reset_state(4, _gen())
    obs0 = env.observe(state)[keys.OBS]
    action = torch.tensor([0, 1, 1, 0])
    next_a, out_a = env.step_state(state, action, _gen())
    next_b, out_b = env.step_state(state, action, _gen())
    assert (out_a == out_b).all()
    assert torch.equal(env.observe(state)[keys.OBS], obs0)  # the input snapshot did not move
    assert not torch.equal(out_a[keys.OBS], obs0)
    assert torch.equal(env.observe(next_a)[keys.OBS], out_a[keys.OBS])
    assert set(next_a["snapshot"].tolist()).isdisjoint(state["snapshot"].tolist() + next_b["snapshot"].tolist())
    # Two further steps along each branch agree too: the copied np_random travels with the snapshot.
    for _ in range(30):
        next_a, out_a = env.step_state(next_a, action, _gen(), inplace=True)
        next_b, out_b = env.step_state(next_b, action, _gen(), inplace=True)
        assert (out_a == out_b).all()


def test_registry_accounting() -> None:
    env = GymnasiumEnv("CartPole-v1")
    root = env.reset_state(4, _gen())
    child, _ = env.step_state(root, torch.zeros(4, dtype=torch.int64), _gen())
    snap = env.snapshot(root)
    assert env.live_count == 12
    assert torch.equal(env.observe(snap)[keys.OBS], env.observe(root)[keys.OBS])
    env.release(child)
    assert env.live_count == 8
    env.release(child)  # double release is harmless
    assert env.live_count == 8
    with pytest.raises(RuntimeError, match="released"):
        env.observe(child)
    same, _ = env.step_state(snap, torch.ones(4, dtype=torch.int64), _gen(), inplace=True)
    assert torch.equal(same["snapshot"], snap["snapshot"])
    assert env.live_count == 8
    env.release(snap)
    assert env.live_count == 4
    env.close()
    assert env.live_count == 0
    env.release(root)  # after close: still harmless
    assert env.live_count == 0


def test_inplace_step_of_an_expanded_state_copies_repeated_ids() -> None:
    env = GymnasiumEnv("CartPole-v1")
    root = env.reset_state(2, _gen())
    expanded = root[torch.tensor([0, 0, 1])]  # as search does: several rows share one snapshot
    nxt, out = env.step_state(expanded, torch.tensor([1, 1, 0]), _gen(), inplace=True)
    ids = nxt["snapshot"].tolist()
    assert len(set(ids)) == 3
    assert ids[0] == root["snapshot"][0]
    assert env.live_count == 3
    assert torch.equal(out[keys.OBS][0], out[keys.OBS][1])  # both rows stepped the same pre-step env
    env.release(nxt)
    assert env.live_count == 0


def test_truncation_and_termination_auto_reset() -> None:
    env = BatchedEnv(GymnasiumEnv("CartPole-v1", {"max_episode_steps": 5}), num_envs=2, seed=0)
    env.reset()
    for t in range(5):
        out = env.step(torch.tensor([t % 2, (t + 1) % 2]))  # alternate pushes: no fall within 5 steps
        assert out[keys.TRUNCATED].tolist() == [t == 4] * 2
        assert not out[keys.TERMINATED].any()
    assert out[keys.IS_FIRST].all()
    assert not torch.equal(out[keys.OBS], out[keys.FINAL_OBS])
    assert out[keys.OBS].abs().max() <= 0.05  # first observations of new episodes
    core = env.env
    assert torch.equal(core.observe(env.state)[keys.OBS], out[keys.OBS])

    env = BatchedEnv(GymnasiumEnv("CartPole-v1"), num_envs=2, seed=0)
    env.reset()
    ended = 0
    for _ in range(60):  # always pushing right topples the pole in well under 60 steps
        out = env.step(torch.ones(2, dtype=torch.int64))
        done = out[keys.TERMINATED]
        assert torch.equal(out[keys.IS_FIRST], done)
        assert not out[keys.TRUNCATED].any()
        assert torch.equal(out[keys.OBS][~done], out[keys.FINAL_OBS][~done])
        final = out[keys.FINAL_OBS][done]
        assert ((final[:, 0].abs() > 2.4) | (final[:, 2].abs() > 12 * 2 * np.pi / 360)).all()
        ended += int(done.sum())
    assert ended >= 2
    env.close()
    assert env.env.live_count == 0


def test_continuous_actions_are_clipped_and_match_the_torch_port() -> None:
    env = GymnasiumEnv("Pendulum-v1")
    root = env.reset_state(2, _gen())
    big_state, big = env.step_state(root, torch.tensor([[5.0], [-9.0]]), _gen())
    edge_state, edge = env.step_state(root, torch.tensor([[2.0], [-2.0]]), _gen())
    inner_state, inner = env.step_state(root, torch.tensor([[1.0], [-1.0]]), _gen())
    assert (big == edge).all()
    assert not torch.equal(inner[keys.OBS], edge[keys.OBS])
    for state in (root, big_state, edge_state, inner_state):
        env.release(state)
    assert env.live_count == 0


def test_adapter_and_torch_cartpole_agree_from_the_same_start() -> None:
    adapter, port = GymnasiumEnv("CartPole-v1"), CartPole(dtype="float64")
    state = adapter.reset_state(3, _gen())
    start = adapter.observe(state)[keys.OBS].double()
    port_state = TensorDict({"physics": start, "elapsed": torch.zeros(3, dtype=torch.int64)}, batch_size=[3])
    # Restart the adapter's envs from exactly the float32-representable start the port got.
    for sid, row in zip(state["snapshot"].tolist(), start.numpy(), strict=True):
        adapter._envs[sid].unwrapped.state = row.copy()
    for t in range(10):
        action = torch.tensor([t % 2, 1, 0])
        state, out = adapter.step_state(state, action, _gen(), inplace=True)
        port_state, ref = port.step_state(port_state, action, _gen())
        torch.testing.assert_close(out[keys.FINAL_OBS], ref[keys.FINAL_OBS], atol=1e-6, rtol=0)
        assert torch.equal(out[keys.TERMINATED], ref[keys.TERMINATED])
    adapter.close()
