"""Actor processes beside the learner (``data.num_actors``): the rollout they collect, the lag bound, faults."""

from __future__ import annotations

import contextlib
import signal
import time

import pytest
import torch
from tensordict import TensorDict

from rl_lightning.algos import PPO
from rl_lightning.data.actors import ActorPool, PoolSettings
from rl_lightning.data.collector import Collector
from rl_lightning.envs import CartPole, Catch, GymnasiumEnv
from rl_lightning.envs.base import BatchedEnv
from rl_lightning.processes.child_processes import pid_alive
from tests.actor_envs import HangOnceCartPole


def _pool(env, module, num_actors=1, num_envs=4, num_steps=16, lag=1, heartbeat_s=60.0, seed=100) -> ActorPool:
    settings = PoolSettings(num_actors, num_envs, num_steps, lag, 3, heartbeat_s, seed)
    return ActorPool(settings, env, module.policy_factory(), module.state_dict())


def _collect_at_version_0(pool: ActorPool, module, rollouts: int) -> list[TensorDict]:
    """``rollouts`` rollouts from ``pool`` with ``module``'s weights published once (version 0); closes the pool."""
    try:
        pool.publish(module.state_dict(), 0)
        return [pool.next_rollout(0).batch for _ in range(rollouts)]
    finally:
        pool.close()


def _assert_same(actor_batch: TensorDict, serial_batch: TensorDict) -> None:
    names = sorted(serial_batch.keys(True, True))
    assert sorted(actor_batch.keys(True, True)) == names
    for name in names:
        assert torch.equal(actor_batch[name], serial_batch[name]), name


def _spo(env):
    from tests.helpers import tiny_spo

    return tiny_spo(env)[0]


def _ppo(env):
    return PPO(env_spec=env.spec, hidden_sizes=(16,))


def _mujoco():
    pytest.importorskip("mujoco")
    return GymnasiumEnv("HalfCheetah-v5")


def _envpool():
    pytest.importorskip("envpool")
    from rl_lightning.envs import EnvPoolEnv

    return EnvPoolEnv("CartPole-v1")


@pytest.mark.parametrize(
    ("make_env", "build"),
    [
        (CartPole, _ppo),
        pytest.param(lambda: GymnasiumEnv("CartPole-v1"), _ppo, marks=pytest.mark.slow),  # SPO's case steps it too
        (_mujoco, _ppo),  # continuous actions, a MuJoCo simulator rebuilt in the actor
        (_envpool, _ppo),  # EnvPool's own thread pool, started in the actor
        (lambda: GymnasiumEnv("CartPole-v1"), _spo),  # SPO's search snapshots the actor's own Gymnasium envs
    ],
    ids=["ppo-torch", "ppo-gymnasium", "ppo-mujoco", "ppo-envpool", "spo-gymnasium"],
)
def test_actor_rollouts_equal_the_serial_rollouts_for_the_same_weights_and_seed(make_env, build):
    env = make_env()
    module = build(env)
    from_actor = _collect_at_version_0(_pool(env, module), module, 2)
    collector = Collector(BatchedEnv(env, 4, "cpu", 100), seed=100 + 10_007)
    policy = module.acting_policy(collector.env, training=True)
    serial = [collector.rollout(policy, 16, 0) for _ in range(2)]
    for actor_batch, serial_batch in zip(from_actor, serial, strict=True):
        _assert_same(actor_batch, serial_batch)


def test_actors_act_in_the_learners_mixed_precision_as_the_serial_collector_does():
    """``trainer.precision: bf16-mixed`` on a CPU learner: the serial collector acts inside Lightning's autocast
    region, so the actors act in bfloat16 too and hand back the same rollout (not the float32 one)."""
    env = Catch(size=8)
    module = PPO(env_spec=env.spec, encoder="impala", hidden_sizes=(16,))
    settings = PoolSettings(1, 4, 16, 1, 3, 60.0, 100, autocast_dtype=torch.bfloat16)
    from_actor = _collect_at_version_0(
        ActorPool(settings, env, module.policy_factory(), module.state_dict()), module, 2
    )

    def serial(low_precision: bool) -> list[TensorDict]:
        collector = Collector(BatchedEnv(env, 4, "cpu", 100), seed=100 + 10_007)
        policy = module.acting_policy(collector.env, training=True)
        with torch.autocast("cpu", torch.bfloat16, enabled=low_precision):
            return [collector.rollout(policy, 16, 0) for _ in range(2)]

    for actor_batch, serial_batch in zip(from_actor, serial(True), strict=True):
        _assert_same(actor_batch, serial_batch)
    float32 = serial(False)
    assert any(not torch.equal(a["value"], b["value"]) for a, b in zip(from_actor, float32, strict=True))


@pytest.mark.parametrize("lag", [1, pytest.param(2, marks=pytest.mark.slow)])  # lag 1 (the default) in the default run
def test_no_rollout_lags_more_than_max_policy_lag_behind_a_slow_learner(lag):
    env = CartPole()
    module = PPO(env_spec=env.spec, hidden_sizes=(16,))
    pool = _pool(env, module, num_actors=2, num_envs=4, num_steps=8, lag=lag)
    lags = []
    try:
        for version in range(6):
            pool.publish(module.state_dict(), version)
            rollout = pool.next_rollout(version)
            lags.append(version - int(rollout.batch["policy_version"].min()))
            time.sleep(0.3)  # the learner, slowed on purpose: the actors fill every slot meanwhile
        assert pool.dropped_rollouts == 0
    finally:
        pool.close()
    assert max(lags) == lag, lags  # the actors ran as far ahead as allowed, and no further


@contextlib.contextmanager
def _deadline(seconds: int):
    """Fail (rather than hang) when the body outlives ``seconds``: a missed hung actor blocks collection forever."""

    def expire(signum, frame):
        raise TimeoutError(f"still waiting after {seconds} s: the hung actor was never replaced")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_hung_actor_is_replaced_and_collection_goes_on(tmp_path):
    marker = tmp_path / "hung"
    env = HangOnceCartPole(str(marker), hang_at=20)
    module = PPO(env_spec=env.spec, hidden_sizes=(16,))
    pool = _pool(env, module, heartbeat_s=2.0)
    try:
        with _deadline(120):
            pool.publish(module.state_dict(), 0)
            first_pid = pool.pids[0]
            rollouts = [pool.next_rollout(0) for _ in range(3)]  # the 2nd rollout hangs (calls 17..32)
            assert marker.exists()
            assert pool.restarts == 1
            assert pool.pids[0] != first_pid
            assert not pid_alive(first_pid)
            assert [r.batch.shape for r in rollouts] == [torch.Size([16, 4])] * 3
            assert rollouts[-1].stats["actors/restarts"] == 1.0
    finally:
        pool.close()
    assert not any(pid_alive(pid) for pid in pool.pids)


def test_self_play_actor_rollouts_equal_the_serial_ones_with_league_and_bots():
    from rl_lightning.data.actors.recipes import SelfPlayRecipe
    from rl_lightning.data.selfplay import SelfPlay
    from rl_lightning.envs.games import OpenSpielEnv

    env = OpenSpielEnv("open_spiel:tic_tac_toe")
    league = {"size": 2, "snapshot_every_n_updates": 1, "share": 0.5, "bots": {"random": 0.25}}
    module = PPO(env_spec=env.spec, hidden_sizes=(16,))
    settings = PoolSettings(1, 4, 12, 1, 3, 60.0, 100)
    recipe = lambda: SelfPlayRecipe(env, None, league, None)  # noqa: E731 - the pool calls it at each start
    pool = ActorPool(settings, env, module.policy_factory(), module.state_dict(), recipe)
    try:
        from_actor = []
        for version in range(3):  # a league snapshot at every version: the 3rd rollout plays two snapshots
            pool.publish(module.state_dict(), version)
            from_actor.append(pool.next_rollout(version).batch)
    finally:
        pool.close()
    selfplay = SelfPlay(env, None, league)
    collector = selfplay.collector(BatchedEnv(env, 4, "cpu", 100), 100 + 10_007, module)
    policy = module.acting_policy(collector.env, training=True)
    for actor_batch in from_actor:
        # the actor collects its next rollout as soon as its slot is free: with the newest weights it has then
        version = int(actor_batch["policy_version"].max())
        module.updates = module.policy_version = version
        selfplay.before_rollout(module)
        _assert_same(actor_batch, collector.rollout(policy, 12, version))
    assert len(selfplay.league.slots) == min(2, 1 + version)  # the league moved with the versions the actor saw


def test_dreamer_actor_windows_equal_the_serial_ones_prefill_then_player():
    from rl_lightning.data.actors.recipes import DreamerRecipe
    from rl_lightning.data.sequence_collector import SequenceCollector
    from rl_lightning.envs.random_action import random_action
    from tests.helpers import tiny_dreamer

    env = CartPole()
    module = tiny_dreamer(env)[0]
    settings = PoolSettings(1, 2, 8, 1, 3, 60.0, 100)
    # the first window is the prefill's (16 env steps: uniform random), the next two the player's
    pool = ActorPool(settings, env, module.policy_factory(), module.state_dict(), lambda: DreamerRecipe(16, 0, 16))
    from_actor = _collect_at_version_0(pool, module, 3)
    collector = SequenceCollector(BatchedEnv(env, 2, "cpu", 100), seed=100 + 10_007)

    def prefill(view, gen):
        return TensorDict({"action": random_action(env.spec, view, gen)}, batch_size=view.batch_size)

    player = module.player(2, torch.device("cpu"))
    for policy, actor_batch in zip([prefill, player, player], from_actor, strict=True):
        _assert_same(actor_batch, torch.cat([collector.rollout(policy, 4, 0), collector.rollout(policy, 4, 0)]))


def test_episode_means_over_actors_weigh_each_actor_by_its_finished_episodes():
    from rl_lightning.data.actors.pool import episode_means, episode_sums

    nan = float("nan")
    actors = [  # {stat: (mean, how many episodes or games stand behind it)}
        {"episode_return": (10.0, 1.0), "episode_length": (5.0, 1.0)},
        {"episode_return": (20.0, 3.0), "episode_length": (9.0, 3.0), "game_score": (4.0, 1.0)},
        {"episode_return": (nan, 0.0), "episode_length": (nan, 0.0)},  # finished nothing in this rollout
        {"episode_return": (1.0, 4.0), "episode_length": (2.0, 4.0), "game_score": (10.0, 2.0)},  # 2 games, 4 lives
    ]
    means = episode_means(episode_sums(actors))
    finished = [10.0, 20.0, 20.0, 20.0, 1.0, 1.0, 1.0, 1.0]  # the eight episodes one by one
    assert means["rollout/episode_return"] == pytest.approx(sum(finished) / 8)
    assert means["rollout/episode_length"] == pytest.approx((5 + 3 * 9 + 4 * 2) / 8)
    assert means["rollout/game_score"] == pytest.approx((4.0 + 2 * 10.0) / 3)  # per game, not per life
    idle = episode_means(episode_sums([actors[2]]))
    assert idle["rollout/episode_return"] != idle["rollout/episode_return"]  # NaN, as the serial path logs it


@pytest.mark.parametrize(
    ("precision", "device", "dtype"),
    [("bf16-mixed", "cpu", torch.bfloat16), ("16-mixed", "cpu", torch.float16), ("32-true", "cpu", None),
     ("bf16-true", "cpu", None), ("bf16-mixed", "cuda", None)],
)  # fmt: skip
def test_the_actors_dtype_is_the_cpu_learners_autocast_dtype(precision, device, dtype):
    from types import SimpleNamespace

    from rl_lightning.data.actors.setup import acting_dtype

    datamodule = SimpleNamespace(trainer=SimpleNamespace(precision=precision))
    assert acting_dtype(datamodule, SimpleNamespace(device=torch.device(device))) == dtype
    assert acting_dtype(SimpleNamespace(trainer=None), SimpleNamespace(device=torch.device("cpu"))) is None
