"""SequenceCollector: the DreamerV3 replay stream against a naive per-env reference, episode structure,
episode statistics, determinism and bit-exact resume, the in-process Gymnasium env count, policy view and check mode."""

from __future__ import annotations

import io
import math
from collections.abc import Callable

import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.sequence_collector import SequenceCollector
from rl_lightning.envs import BatchedEnv, CartPole, Catch, GymnasiumEnv, TorchEnv

ROW_KEYS = (keys.OBS, keys.REWARD, keys.IS_FIRST, keys.TERMINATED, keys.TRUNCATED, keys.ACTION)


class _FixedResetCartPole(CartPole):
    """CartPole whose every episode starts from the same state, so single envs and a batch reset identically."""

    def _start(self, noise: torch.Tensor) -> torch.Tensor:
        start = torch.tensor([0.01, -0.02, 0.03, -0.04], dtype=self.dtype, device=noise.device)
        return start.expand(noise.shape).clone()


class _SpyCartPole(CartPole):
    """CartPole that records every ``step_state`` output (the same-step auto-reset observations)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.outs: list[TensorDict] = []

    def step_state(self, state, action, generator, inplace=False):
        nxt, out = super().step_state(state, action, generator, inplace=inplace)
        self.outs.append(out.clone())
        return nxt, out


def _scripted_actions(tick: int, num_envs: int, num_actions: int) -> torch.Tensor:
    """Deterministic actions from (tick, env index) only: some envs push one way (terminate), others wobble."""
    i = torch.arange(num_envs)
    wobble = (tick + i) % 2
    slow = (tick // 2 + i) % num_actions
    push = torch.full_like(i, num_actions - 1)
    return torch.where(i % 3 == 0, push, torch.where(i % 3 == 1, wobble, slow)) % num_actions


class _Scripted:
    """Policy acting ``_scripted_actions(tick, env)``; ignores the generator; records the views it saw."""

    def __init__(self, num_actions: int) -> None:
        self.num_actions = num_actions
        self.tick = 0
        self.views: list[TensorDict] = []

    def __call__(self, view: TensorDict, gen: torch.Generator) -> TensorDict:
        self.views.append(view.clone())
        action = _scripted_actions(self.tick, view.batch_size[0], self.num_actions)
        self.tick += 1
        return TensorDict({keys.ACTION: action}, batch_size=view.batch_size)


def _random_policy(num_actions: int) -> Callable[[TensorDict, torch.Generator], TensorDict]:
    def policy(view: TensorDict, gen: torch.Generator) -> TensorDict:
        n = view.batch_size[0]
        action = torch.randint(0, num_actions, (n,), generator=gen, device=gen.device)
        return TensorDict({keys.ACTION: action}, batch_size=view.batch_size)

    return policy


class _RefStream:
    """One env, stepped naively by the documented stream rules with the functional core on a 1-row state.

    ``sync`` (if given) supplies the new episode's start state after a done step (the batched env's reset draws
    from a shared generator, so the reference copies it); without it the core's own auto-reset state is used.
    """

    def __init__(self, core: TorchEnv, state: TensorDict, sync: Callable[[], TensorDict] | None) -> None:
        self.core, self.state, self.sync = core, state, sync
        self.gen = torch.Generator().manual_seed(12345)  # only feeds discarded resets (or fixed ones)
        self.view = self._first(core.observe(state)[keys.OBS][0])
        self.pending_obs: torch.Tensor | None = None

    @staticmethod
    def _first(obs: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            keys.OBS: obs,
            keys.REWARD: torch.tensor(0.0),
            keys.IS_FIRST: torch.tensor(True),
            keys.TERMINATED: torch.tensor(False),
            keys.TRUNCATED: torch.tensor(False),
        }

    def tick(self, action: torch.Tensor) -> dict[str, torch.Tensor]:
        last = bool(self.view[keys.TERMINATED]) or bool(self.view[keys.TRUNCATED])
        row = dict(self.view)
        row[keys.ACTION] = torch.zeros_like(action) if last else action.clone()
        if last:  # the terminal row's tick: do not step, show the reset observation next
            assert self.pending_obs is not None
            self.view = self._first(self.pending_obs)
            self.pending_obs = None
            return row
        nxt, out = self.core.step_state(self.state, action.reshape(1), self.gen, inplace=False)
        self.view = {
            keys.OBS: out[keys.FINAL_OBS][0],
            keys.REWARD: out[keys.REWARD][0],
            keys.IS_FIRST: torch.tensor(False),
            keys.TERMINATED: out[keys.TERMINATED][0],
            keys.TRUNCATED: out[keys.TRUNCATED][0],
        }
        if bool(out[keys.TERMINATED][0]) or bool(out[keys.TRUNCATED][0]):
            self.state = self.sync() if self.sync is not None else nxt
            self.pending_obs = self.core.observe(self.state)[keys.OBS][0]
        else:
            self.state = nxt
        return row


@pytest.mark.parametrize(
    ("make_core", "sync"),
    [
        pytest.param(lambda: _FixedResetCartPole(max_episode_steps=20), False, id="cartpole-fixed-reset"),
        pytest.param(lambda: CartPole(max_episode_steps=20), True, id="cartpole"),
        pytest.param(lambda: Catch(rows=4, columns=4, size=8), True, id="catch"),
    ],
)
def test_matches_naive_per_env_reference(make_core: Callable[[], TorchEnv], sync: bool) -> None:
    num_envs, num_ticks = 6, 90
    core = make_core()
    env = BatchedEnv(core, num_envs, seed=3)
    collector = SequenceCollector(env, seed=0)
    scripted = _Scripted(core.spec.num_actions)
    start_states: list[TensorDict] = []

    def policy(view: TensorDict, gen: torch.Generator) -> TensorDict:
        if not start_states:  # the env's reset states, before the collector steps them
            assert env.state is not None
            start_states.append(env.state.clone())
        return scripted(view, gen)

    row0 = collector.tick(policy, policy_version=7)
    refs = []
    for i in range(num_envs):
        syncer = (lambda i=i: env.state[i : i + 1].clone()) if sync else None
        refs.append(_RefStream(make_core(), start_states[0][i : i + 1].clone(), syncer))
    # The reference's first row comes from the same reset state, before any step.
    for i, ref in enumerate(refs):
        assert torch.equal(ref.view[keys.OBS], row0[keys.OBS][i])
    first_actions = _scripted_actions(0, num_envs, core.spec.num_actions)
    ref_rows = [[ref.tick(first_actions[i]) for i, ref in enumerate(refs)]]
    rows = [row0]
    for t in range(1, num_ticks):
        rows.append(collector.tick(policy, policy_version=7))
        actions = _scripted_actions(t, num_envs, core.spec.num_actions)
        ref_rows.append([ref.tick(actions[i]) for i, ref in enumerate(refs)])
    batch = torch.stack(rows)
    assert batch.batch_size == torch.Size([num_ticks, num_envs])
    assert bool((batch[keys.POLICY_VERSION] == 7).all())
    for t in range(num_ticks):
        for i in range(num_envs):
            for key in ROW_KEYS:
                got, want = batch[key][t, i], ref_rows[t][i][key]
                assert got.dtype == want.dtype or key in (keys.REWARD,), (t, i, key, got.dtype, want.dtype)
                assert torch.equal(got, want.to(got.dtype)), f"tick {t} env {i} key {key}: {got} != {want}"
    # The scripted actions really produce episode ends (and for CartPole both kinds) and zeroed last actions.
    last = batch[keys.TERMINATED] | batch[keys.TRUNCATED]
    assert int(last.sum()) >= num_envs
    assert int(batch[keys.IS_FIRST][1:].sum()) >= num_envs
    if isinstance(core, CartPole):
        assert bool(batch[keys.TERMINATED].any())
        assert bool(batch[keys.TRUNCATED].any())
    assert bool((batch[keys.ACTION][last] == 0).all())


def _last_mask(batch: TensorDict) -> torch.Tensor:
    return batch[keys.TERMINATED] | batch[keys.TRUNCATED]


def test_episode_structure_and_no_step_on_terminal_tick() -> None:
    num_envs, num_ticks = 5, 80
    core = _SpyCartPole(max_episode_steps=15)
    env = BatchedEnv(core, num_envs, seed=1)
    collector = SequenceCollector(env, seed=2)
    policy = _random_policy(2)
    rows, states = [], []
    for _ in range(num_ticks):
        rows.append(collector.tick(policy, policy_version=0))
        assert env.state is not None
        states.append(env.state.clone())
    batch = torch.stack(rows)
    assert batch.batch_size == torch.Size([num_ticks, num_envs])  # one row per env per tick
    assert len(core.outs) == num_ticks  # one (functional) env step per tick, whatever the episode phase
    last = _last_mask(batch)
    first = batch[keys.IS_FIRST]
    assert bool(first[0].all())
    assert bool((batch[keys.REWARD][0] == 0).all())
    assert not bool(last[0].any())
    assert int(last.sum()) >= 2 * num_envs
    for t in range(num_ticks - 1):
        for i in range(num_envs):
            if bool(last[t, i]):
                # The terminal row came from the step at tick t-1; that step's auto-reset obs is the next row.
                assert bool(first[t + 1, i])
                assert float(batch[keys.REWARD][t + 1, i]) == 0.0
                assert not bool(last[t + 1, i])
                assert torch.equal(batch[keys.OBS][t + 1, i], core.outs[t - 1][keys.OBS][i])
                assert torch.equal(batch[keys.OBS][t, i], core.outs[t - 1][keys.FINAL_OBS][i])
                # The env is not advanced on the terminal tick.
                assert (states[t][i] == states[t - 1][i]).all()
                assert int(states[t]["elapsed"][i]) == 0
                assert int(batch[keys.ACTION][t, i]) == 0
            elif bool(first[t, i]):
                # Reset rows follow terminal rows only, and are followed by a normal transition.
                assert t == 0 or bool(last[t - 1, i])
                assert not bool(first[t + 1, i])
                assert float(batch[keys.REWARD][t + 1, i]) == 1.0
            else:
                assert not bool(first[t + 1, i])
            if not bool(last[t, i]) and not bool(first[t + 1, i]):
                # A normal transition row: obs is the step's true next obs (before any auto-reset).
                assert torch.equal(batch[keys.OBS][t + 1, i], core.outs[t][keys.FINAL_OBS][i])
                assert torch.equal(batch[keys.REWARD][t + 1, i], core.outs[t][keys.REWARD][i])
                assert bool(batch[keys.TERMINATED][t + 1, i]) == bool(core.outs[t][keys.TERMINATED][i])
                assert bool(batch[keys.TRUNCATED][t + 1, i]) == bool(core.outs[t][keys.TRUNCATED][i])


def _naive_episode_stats(batch: TensorDict) -> tuple[list[float], list[int]]:
    """Complete episodes (is_first row .. last row) per env: return = reward sum, length = rows - 1."""
    returns, lengths = [], []
    num_ticks, num_envs = batch.batch_size
    last = _last_mask(batch)
    for i in range(num_envs):
        ret, count, open_ = 0.0, 0, False
        for t in range(num_ticks):
            if bool(batch[keys.IS_FIRST][t, i]):
                ret, count, open_ = 0.0, 0, True
            ret += float(batch[keys.REWARD][t, i])
            count += 1
            if bool(last[t, i]) and open_:
                returns.append(ret)
                lengths.append(count - 1)
                open_ = False
    return returns, lengths


@pytest.mark.parametrize("env_name", ["cartpole", "catch"])
def test_naive_episodes_have_the_env_s_returns_and_lengths(env_name: str) -> None:
    core: TorchEnv = CartPole(max_episode_steps=25) if env_name == "cartpole" else Catch()
    collector = SequenceCollector(BatchedEnv(core, 4, seed=5), seed=6)
    batch = collector.rollout(_random_policy(core.spec.num_actions), 70, policy_version=0)
    returns, lengths = _naive_episode_stats(batch)
    assert len(returns) >= 4
    if env_name == "cartpole":
        assert returns == [float(n) for n in lengths]
        assert max(lengths) <= 25
    else:
        assert set(returns) <= {-1.0, 1.0}
        assert set(lengths) == {7}


def _window_stats(batch: TensorDict, start: int) -> tuple[float, float]:
    """Mean return/length (naive loop) of the episodes whose last row is at tick >= ``start``."""
    returns, lengths = _naive_episode_stats(batch)
    last = _last_mask(batch)
    num_ticks, num_envs = batch.batch_size
    ends = [t for i in range(num_envs) for t in range(num_ticks) if bool(last[t, i])]  # naive-loop order
    kept = [(r, n) for r, n, t in zip(returns, lengths, ends, strict=True) if t >= start]
    assert kept
    return sum(r for r, _ in kept) / len(kept), sum(n for _, n in kept) / len(kept)


@pytest.mark.parametrize("env_name", ["cartpole", "catch"])
def test_episode_stats_match_naive_loop(env_name: str) -> None:
    core: TorchEnv = CartPole(max_episode_steps=25) if env_name == "cartpole" else Catch()
    collector = SequenceCollector(BatchedEnv(core, 4, seed=5), seed=6)
    policy = _random_policy(core.spec.num_actions)
    batch = collector.rollout(policy, 70, policy_version=0)
    stats = collector.episode_stats()
    want_return, want_length = _window_stats(batch, 0)
    assert float(stats["episode_return"]) == pytest.approx(want_return, rel=1e-6)
    assert float(stats["episode_length"]) == pytest.approx(want_length, rel=1e-6)
    # Stats reset on read; a window in which no episode ends reports NaN.
    first_tick = SequenceCollector(BatchedEnv(core, 4, seed=5), seed=6)
    first_tick.rollout(policy, 3, policy_version=0)
    assert math.isnan(float(first_tick.episode_stats()["episode_return"]))
    # The next window counts only the episodes that end in it.
    batch2 = collector.rollout(policy, 40, policy_version=0)
    stats2 = collector.episode_stats()
    want_return, want_length = _window_stats(torch.cat([batch, batch2]), batch.batch_size[0])
    assert float(stats2["episode_return"]) == pytest.approx(want_return, rel=1e-6)
    assert float(stats2["episode_length"]) == pytest.approx(want_length, rel=1e-6)


def _assert_same(a: TensorDict, b: TensorDict) -> None:
    assert set(a.keys()) == set(b.keys())
    for key in a.keys():  # noqa: SIM118 - TensorDict keys
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("env_name", ["cartpole", "catch"])
def test_same_seeds_same_rollouts(env_name: str) -> None:
    def run(env_seed: int, sampling_seed: int) -> TensorDict:
        core: TorchEnv = CartPole(max_episode_steps=20) if env_name == "cartpole" else Catch()
        collector = SequenceCollector(BatchedEnv(core, 3, seed=env_seed), seed=sampling_seed)
        return collector.rollout(_random_policy(core.spec.num_actions), 50, policy_version=0)

    _assert_same(run(1, 2), run(1, 2))
    assert not torch.equal(run(1, 2)[keys.ACTION], run(1, 3)[keys.ACTION])
    assert not torch.equal(run(1, 2)[keys.OBS], run(4, 2)[keys.OBS])


@pytest.mark.parametrize("env_name", ["cartpole", "catch"])
def test_state_dict_resumes_bit_exactly_mid_episode(env_name: str) -> None:
    def make() -> TorchEnv:
        return CartPole(max_episode_steps=20) if env_name == "cartpole" else Catch()

    policy = _random_policy(make().spec.num_actions)
    first = SequenceCollector(BatchedEnv(make(), 4, seed=11), seed=12)
    first.rollout(policy, 30, policy_version=0)
    first.episode_stats()  # start a fresh stats window at the save point
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    expected = first.rollout(policy, 30, policy_version=0)
    expected_stats = first.episode_stats()
    # Mid-episode: some env is neither at a reset nor at an end at the save point.
    assert bool((~expected[keys.IS_FIRST][0]).any())

    buffer.seek(0)
    resumed = SequenceCollector(BatchedEnv(make(), 4, seed=999), seed=998)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    got = resumed.rollout(policy, 30, policy_version=0)
    _assert_same(got, expected)
    stats = resumed.episode_stats()
    for name, value in expected_stats.items():
        assert torch.equal(stats[name], value), name


def test_gymnasium_env_is_stepped_live_without_copies() -> None:
    """In-process Gymnasium envs run in next-step autoreset: the collector never holds more envs than it steps."""
    num_envs = 3
    core = GymnasiumEnv("CartPole-v1", {"max_episode_steps": 8})
    env = BatchedEnv(core, num_envs, seed=0)
    collector = SequenceCollector(env, seed=0)
    policy = _random_policy(2)
    rows = []
    for _ in range(60):
        rows.append(collector.tick(policy, policy_version=0))
        assert core.live_count == num_envs
    batch = torch.stack(rows)
    last = _last_mask(batch)
    assert int(last.sum()) >= 2 * num_envs  # episodes did end (and some terminal ticks discarded a step)
    for t, i in last[:-1].nonzero().tolist():
        assert bool(batch[keys.IS_FIRST][t + 1, i])
        assert float(batch[keys.REWARD][t + 1, i]) == 0.0
    # No saved env state for snapshot envs: loading restarts every episode without leaking the old ones.
    collector.load_state_dict(collector.state_dict())
    collector.rollout(policy, 5, policy_version=0)
    assert core.live_count == num_envs
    collector.reset_episodes()
    collector.rollout(policy, 5, policy_version=0)
    assert core.live_count == num_envs
    collector.close()
    assert core.live_count == 0


def test_policy_sees_obs_and_is_first() -> None:
    env = BatchedEnv(CartPole(max_episode_steps=10), 3, seed=0)
    collector = SequenceCollector(env, seed=0)
    policy = _Scripted(2)
    batch = collector.rollout(policy, 30, policy_version=0)
    assert len(policy.views) == 30
    for t, view in enumerate(policy.views):
        assert torch.equal(view[keys.OBS], batch[keys.OBS][t])
        assert torch.equal(view[keys.IS_FIRST], batch[keys.IS_FIRST][t])
    assert bool(batch[keys.IS_FIRST][1:].any())


def test_check_mode_rejects_illegal_actions() -> None:
    def constant(value) -> Callable[[TensorDict, torch.Generator], TensorDict]:
        def policy(view: TensorDict, gen: torch.Generator) -> TensorDict:
            action = torch.full(view.batch_size, value)
            return TensorDict({keys.ACTION: action}, batch_size=view.batch_size)

        return policy

    # Legal actions pass in check mode, across terminal ticks too.
    ok = SequenceCollector(BatchedEnv(CartPole(max_episode_steps=5), 2, check=True), seed=0)
    batch = ok.rollout(constant(1), 20, policy_version=0)
    assert bool(_last_mask(batch).any())
    for value, match in [(2, "outside Discrete"), (-1, "outside Discrete"), (0.5, "int64")]:
        bad = SequenceCollector(BatchedEnv(CartPole(), 2, check=True), seed=0)
        with pytest.raises(ValueError, match=match):
            bad.tick(constant(value), policy_version=0)
