"""What the actor pool hands the learner, column by column, and how it counts: two actors against serial collectors
seeded at each actor's offset, rollouts kept across a kill, stale rollouts dropped, seeds of a replacement, the
failure streak, borrowed threads, the weights' seqlock, and the env-step count of the datamodule."""

from __future__ import annotations

import os
import signal
import time
from types import SimpleNamespace

import pytest
import torch

from rl_lightning.algos import PPO
from rl_lightning.data.actors import ActorPool, PoolSettings
from rl_lightning.data.actors.gather import GENERATION_STRIDE, ActorRollout, actor_spec, episode_means, episode_sums
from rl_lightning.data.collector import Collector
from rl_lightning.envs import CartPole
from rl_lightning.envs.base import BatchedEnv
from rl_lightning.processes.child_processes import pid_alive
from tests.actor_envs import SlowCartPole
from tests.actor_serial import assert_equal_to_serial_actors, assert_same
from tests.fault_envs import FaultyCartPole

SEED = 100


def _module(env) -> PPO:
    torch.manual_seed(0)
    return PPO(env_spec=env.spec, hidden_sizes=(16,))


def _pool(env, module, num_actors=2, num_envs=4, num_steps=16, lag=1, max_failures=3, **extra) -> ActorPool:
    settings = PoolSettings(num_actors, num_envs, num_steps, lag, max_failures, 60.0, SEED, **extra)
    return ActorPool(settings, env, module.policy_factory(), module.state_dict())


def _serial(env, module, envs: int, seed: int) -> tuple[Collector, object]:
    """A serial collector of ``envs`` envs seeded as an actor whose first env seed is ``seed``."""
    collector = Collector(BatchedEnv(env, envs, "cpu", seed), seed=seed + 10_007)
    return collector, module.acting_policy(collector.env, training=True)


def _until(condition, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_two_actors_hand_over_every_column_and_episode_stat_of_serial_collectors_at_their_offsets():
    env = CartPole(max_episode_steps=12)  # short episodes: every rollout finishes some, so the stats are real
    module = _module(env)
    pool = _pool(env, module, num_actors=2, num_envs=6, num_steps=20)
    try:
        pool.publish(module.state_dict(), 0)
        gathered = [pool.next_rollout(0) for _ in range(3)]
    finally:
        pool.close()
    assert_equal_to_serial_actors(gathered, env, module, 2, 3, 20, SEED)


def test_game_score_over_actors_is_a_mean_over_games_not_over_lives():
    from rl_lightning.data.actors.core import ActorCore
    from rl_lightning.data.actors.recipes import SingleAgentRecipe
    from tests.actor_envs import LivesCartPole

    envs = [LivesCartPole(lives=1), LivesCartPole(lives=4)]
    module = _module(envs[0])
    settings = PoolSettings(2, 8, 100, 1, 3, 60.0, SEED)
    stats = []
    for index, env in enumerate(envs):
        spec = actor_spec(settings, env, module.policy_factory(), SingleAgentRecipe(), index, 0, os.getpid())
        core = ActorCore(spec)  # in this process: its env is ``env`` itself, whose games the test can read
        torch._foreach_copy_(list(core.weights.values()), list(module.state_dict().values()))
        core.loaded(0)
        stats.append(core.collect()[1])
        core.close()
    games = envs[0].game_scores + envs[1].game_scores
    assert len(envs[0].game_scores) > 2 * len(envs[1].game_scores) > 0  # 1-life games end far more often
    means = episode_means(episode_sums(stats))
    assert means["rollout/game_score"] == pytest.approx(sum(games) / len(games), rel=1e-5)


def test_finished_rollouts_of_a_killed_actor_are_used_and_its_replacement_collects_with_fresh_seeds():
    """Lag 2: one rollout waits with the learner, another in the pipe, when the actor is SIGKILLed. Both are used
    (not lost, no BrokenPipeError handing a slot back to the dead actor), then the replacement's rollouts follow,
    seeded one generation on; every env step counted is one the learner received."""
    env = CartPole()
    module = _module(env)
    pool = _pool(env, module, num_actors=1, num_envs=4, num_steps=16, lag=2)
    try:
        pool.publish(module.state_dict(), 0)
        actor = pool.actors[0]
        _until(lambda: pool._receive(actor) and len(actor.waiting) == 2)  # both slots full, both announced
        first = pool.next_rollout(0)
        assert len(actor.waiting) == 1  # the second one waits with the learner
        _until(actor.pipe.poll)  # the third one is written and announced on the pipe, not yet read
        dead = pool.pids[0]
        os.kill(dead, signal.SIGKILL)
        _until(lambda: not pid_alive(dead) and not actor.process.is_alive())  # the pool knows it is dead too
        kept = [pool.next_rollout(0), pool.next_rollout(0)]
        fresh = [pool.next_rollout(0), pool.next_rollout(0)]
        assert pool.restarts == 1
        assert pool.lost_rollouts == 0  # it had filled both slots: nothing was being collected
        assert pool.dropped_rollouts == 0
        assert kept[-1].stats["actors/restarts"] == 1.0
    finally:
        pool.close()
    collector, policy = _serial(env, module, 4, SEED)
    for rollout in [first, *kept]:
        assert_same(rollout.batch, collector.rollout(policy, 16, 0))
    collector, policy = _serial(env, module, 4, SEED + GENERATION_STRIDE)  # generation 1
    for rollout in fresh:
        assert_same(rollout.batch, collector.rollout(policy, 16, 0))
    assert [r.env_steps for r in [first, *kept, *fresh]] == [64] * 5


def test_a_replacement_never_runs_ahead_of_the_lag_bound_while_its_predecessors_rollouts_wait():
    """Lag 2: the killed actor leaves two finished rollouts; its replacement gets a slot only as each is taken, so
    with the learner moving one version per update no rollout is ever more than 2 versions behind and none is
    dropped (handed both slots at once, it collects two rollouts with version 0 and the 4th update drops one)."""
    env = CartPole()
    module = _module(env)
    pool = _pool(env, module, num_actors=1, num_envs=4, num_steps=16, lag=2)
    try:
        pool.publish(module.state_dict(), 0)
        actor = pool.actors[0]
        _until(lambda: pool._receive(actor) and len(actor.waiting) == 2)  # both slots full: the actor waits
        dead = pool.pids[0]
        os.kill(dead, signal.SIGKILL)
        _until(lambda: not actor.process.is_alive())
        pool._check_health()  # replaced now, its two rollouts carried over
        fresh = pool.actors[0]
        assert fresh is not actor
        assert len(fresh.waiting) == 2
        _until(lambda: float(pool.heartbeat[0]) > 0 and int(pool.idle[0]) == 1)  # started, waiting for a slot
        time.sleep(0.5)  # time to collect, had it been handed a slot
        lags = []
        for version in range(1, 7):
            pool.publish(module.state_dict(), version)
            rollout = pool.next_rollout(version)
            lags.append(version - int(rollout.batch["policy_version"].min()))
        assert pool.dropped_rollouts == 0
        assert max(lags) <= 2, lags
    finally:
        pool.close()


def test_a_stale_rollout_is_dropped_counted_and_never_used():
    """The learner's version jumps past the lag bound while the actor collects with version 0: that rollout is
    tagged with the version it was collected with (not the newest published), dropped (its env steps count), and the
    update gets a fresh one."""
    from tests.actor_envs import SlowCartPole

    env = SlowCartPole(step_s=0.15)  # a rollout of 8 ticks takes 1.2 s
    module = _module(env)
    pool = _pool(env, module, num_actors=1, num_envs=4, num_steps=8, lag=1)
    try:
        pool.publish(module.state_dict(), 0)
        _until(lambda: float(pool.heartbeat[0]) > 0 and int(pool.idle[0]) == 0)  # collecting with version 0
        time.sleep(0.3)
        pool.publish(module.state_dict(), 5)  # while it collects
        rollout = pool.next_rollout(5)
        assert int(rollout.batch["policy_version"].min()) == 5  # collected with the newest weights
        assert pool.dropped_rollouts == 1
        assert rollout.stats["actors/dropped_rollouts"] == 1.0
        assert rollout.env_steps == 2 * 32  # the dropped rollout was collected whole: its env steps count
        assert pool.lost_rollouts == 0
    finally:
        pool.close()


def test_a_good_rollout_resets_the_failure_streak():
    """Every actor process raises at its 20th env step (its 2nd rollout of 16): with ``max_failures: 2`` the run goes
    on, because each replacement delivers a good rollout before it fails again."""
    env = FaultyCartPole(fail_at=20)
    module = _module(env)
    pool = _pool(env, module, num_actors=1, num_envs=4, num_steps=16, lag=1, max_failures=2)
    try:
        pool.publish(module.state_dict(), 0)
        rollouts = [pool.next_rollout(0) for _ in range(4)]
        assert pool.restarts == 3
        assert pool.lost_rollouts == 3  # each failure lost the rollout it was collecting
        assert [r.env_steps for r in rollouts] == [64] * 4  # lost rollouts add no env steps
    finally:
        pool.close()


def test_an_update_starts_on_the_learners_own_threads_after_borrowing_an_idle_actors_core():
    from rl_lightning.processes.learner_threads import follow_actors

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("lending needs a second core")
    env = SlowCartPole(step_s=0.1)  # its next rollout takes 0.8 s: it cannot be idle again before the check below
    module = _module(env)
    own = torch.get_num_threads()
    torch.set_num_threads(1)
    pool = _pool(env, module, num_actors=1, num_envs=4, num_steps=8, borrow_idle_cores=True)
    try:
        pool.publish(module.state_dict(), 0)
        _until(lambda: pool.actors[0].pipe.poll() and int(pool.idle[0]) == 1)  # its rollout done, waiting for a slot
        follow_actors()  # an optimiser step while the actor waits: the learner borrows its core
        assert torch.get_num_threads() == 2
        pool.next_rollout(0)  # its slot is free again: it collects, so the core goes back
        assert torch.get_num_threads() == 1
    finally:
        pool.close()
        torch.set_num_threads(own)


def test_published_weights_are_stamped_with_their_version_only_after_the_copy(monkeypatch):
    from rl_lightning.data.actors.weights import SharedWeights

    module = _module(CartPole())
    weights = SharedWeights(module.state_dict())
    weights.publish(module.state_dict(), 0)
    seen = []
    real_copy = torch._foreach_copy_

    def spying_copy(destination, source):
        if any(d is b for d in destination[:1] for copy in weights.buffers for b in copy[:1]):
            target = next(i for i, copy in enumerate(weights.buffers) if copy[0] is destination[0])
            seen.append((int(weights.control[target]), weights.version))
        return real_copy(destination, source)

    monkeypatch.setattr(torch, "_foreach_copy_", spying_copy)
    weights.publish(module.state_dict(), 1)
    assert seen == [(-1, 0)]  # while copying: the copy is marked as being written, readers still get version 0
    assert weights.version == 1


def test_an_env_error_reaches_the_learner_even_when_the_env_then_hangs_in_close(tmp_path):
    from tests.actor_envs import HangInCloseCartPole

    env = HangInCloseCartPole(fail_at=20)
    module = _module(env)
    settings = PoolSettings(1, 4, 16, 1, 1, 600.0, SEED)  # a hung actor would take 10 minutes to be noticed
    pool = ActorPool(settings, env, module.policy_factory(), module.state_dict())
    try:
        pool.publish(module.state_dict(), 0)
        pool.next_rollout(0)
        started = time.monotonic()
        with pytest.raises(Exception, match="physics blew up at call 20") as caught:
            pool.next_rollout(0)
        assert "heartbeat" not in str(caught.value)
        assert time.monotonic() - started < 30
    finally:
        pool.close()


def test_close_detaches_the_exit_finalizer_so_a_reused_pid_is_never_killed():
    env = CartPole()
    module = _module(env)
    pool = _pool(env, module, num_actors=1)
    assert pool._finalizer.alive
    pool.close()
    assert not pool._finalizer.alive


class _StubPool:
    """Hands the datamodule one canned ``ActorRollout`` per update."""

    def __init__(self, rollout: ActorRollout) -> None:
        self.rollout, self.generation = rollout, 0

    def publish(self, state_dict, version) -> None:
        pass

    def next_rollout(self, version) -> ActorRollout:
        return self.rollout

    def close(self) -> None:
        pass


def test_the_datamodule_counts_the_env_steps_the_pool_accounts_for_not_its_rollout_size():
    from tests.helpers import tiny_ppo

    module, datamodule = tiny_ppo(num_envs=4, num_steps=16)
    datamodule.num_actors = 1
    raw = Collector(BatchedEnv(CartPole(), 4, "cpu", 0), seed=1)
    batch = raw.rollout(module.acting_policy(raw.env, training=True), 16, 0)
    batch["logprob"] = torch.full_like(batch["logprob"], -0.25)  # what the actor's older weights gave
    datamodule.actors = _StubPool(ActorRollout(batch, 3 * 64, {"actors/dropped_rollouts": 2.0}))
    datamodule.trainer = SimpleNamespace(lightning_module=module)
    rollout = datamodule._collect_from_actors()
    assert datamodule.local_env_steps == datamodule.env_steps == 3 * 64  # two stale rollouts dropped, counted
    assert torch.equal(rollout.batch["logprob"], torch.full_like(batch["logprob"], -0.25))  # behaviour log-probs
    state = datamodule.state_dict()
    assert state["env_steps"] == 3 * 64


def test_episode_sums_over_ranks_add_both_the_totals_and_the_counts():
    from rl_lightning.data.ranks import merge_sums

    merged = merge_sums([{"episode_return": (30.0, 3.0)}, {"episode_return": (10.0, 1.0), "game_score": (8.0, 2.0)}])
    assert merged == {"episode_return": (40.0, 4.0), "game_score": (8.0, 2.0)}
    assert episode_means(merged)["rollout/episode_return"] == 10.0
