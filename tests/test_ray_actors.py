"""Actors on Ray (``data.actor_backend: ray``) on a local Ray instance: the rollout they collect (two actors column by
column against serial collectors), a killed actor replaced mid-fit with the budget kept, an env broken for good, the
learner's own Ray node gone, and the settings refused before anything starts (DDP included)."""

from __future__ import annotations

import gc
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning.algos import PPO
from rl_lightning.data.actors import ActorPool, PoolSettings
from rl_lightning.envs import CartPole
from rl_lightning.envs.base import BatchedEnv
from rl_lightning.errors import ConfigError, EnvError
from rl_lightning.processes.child_processes import pid_alive
from tests.actor_envs import BreaksForGoodCartPole
from tests.actor_serial import assert_equal_to_serial_actors
from tests.cli_subprocess import ERROR_PREFIX, error_line, run_cli, run_python
from tests.helpers import tiny_ppo, trainer
from tests.test_actors import _deadline
from tests.test_actors_cli import _descendants

ray = pytest.importorskip("ray")

from rl_lightning.data.actors.ray_checks import (  # noqa: E402 - needs Ray
    check_ray_cluster,
    init_ray,
    refuse_too_many_actors,
)
from rl_lightning.data.actors.ray_pool import RayActorPool  # noqa: E402

# The heavy tier (a Ray instance per test): not in the default run; CI runs it as a step of its own.
pytestmark = pytest.mark.heavy

SETTINGS = PoolSettings(1, 4, 16, 1, 3, 60.0, 100)


@pytest.fixture(scope="module")
def _ray_for_the_module():
    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def local_ray(_ray_for_the_module):
    """A local Ray instance of two CPUs, shared by the tests of this file that use it (a pool given none starts its
    own and shuts it down)."""
    if not ray.is_initialized():
        init_ray(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="warning")


def _rollouts(pool, module, versions: int, per_version: int = 1) -> list:
    """``per_version`` rollouts per version ``0 .. versions-1`` from ``pool``, weights published at each version;
    closes the pool."""
    try:
        batches = []
        for version in range(versions):
            pool.publish(module.state_dict(), version)
            batches += [pool.next_rollout(version).batch for _ in range(per_version)]
        return batches
    finally:
        pool.close()


def _assert_same(a, b) -> None:
    names = sorted(b.keys(True, True))
    assert sorted(a.keys(True, True)) == names
    for name in names:
        assert torch.equal(a[name], b[name]), name


def test_a_ray_actor_collects_what_a_process_actor_collects_for_the_same_weights_and_seed(local_ray):
    env = CartPole()
    module = PPO(env_spec=env.spec, hidden_sizes=(16,))
    # one version: the process actor picks the newest weights when it starts a rollout, a Ray request when it is sent
    on_ray = _rollouts(RayActorPool(SETTINGS, env, module.policy_factory(), module.state_dict()), module, 1, 2)
    in_process = _rollouts(ActorPool(SETTINGS, env, module.policy_factory(), module.state_dict()), module, 1, 2)
    for ray_batch, process_batch in zip(on_ray, in_process, strict=True):
        _assert_same(ray_batch, process_batch)


def test_two_ray_actors_hand_over_every_column_and_episode_stat_of_serial_collectors_at_their_offsets(local_ray):
    env = CartPole(max_episode_steps=12)  # short episodes: every rollout finishes some, so the stats are real
    torch.manual_seed(0)
    module = PPO(env_spec=env.spec, hidden_sizes=(16,))
    settings = PoolSettings(2, 6, 20, 1, 3, 60.0, 100)
    pool = RayActorPool(settings, env, module.policy_factory(), module.state_dict())
    try:
        pool.publish(module.state_dict(), 0)
        gathered = [pool.next_rollout(0) for _ in range(3)]
    finally:
        pool.close()
    assert_equal_to_serial_actors(gathered, env, module, 2, 3, 20, 100)
    for rollout in gathered:
        assert rollout.stats["actors/lost_rollouts"] == rollout.stats["actors/dropped_rollouts"] == 0.0


def test_spo_ray_actors_act_with_the_normaliser_that_process_rollout_moved_before_any_gradient_step(
    local_ray, tmp_path
):
    """As ``tests/test_actor_replay.py``'s process-actor case: ``learning_starts`` holds the version at 0 while
    ``process_rollout`` moves the observation statistics; each publish puts them again, and the Ray actor loads them
    although the version is unchanged (one request in flight: rollout ``k`` is sent after the publish of update
    ``k - 1``, so it acts with the statistics of rollouts ``0..k-2``)."""
    from tests.actor_replay_toys import spo_normaliser_fit

    acted, means = spo_normaliser_fit(tmp_path, "ray")
    assert torch.equal(acted[0], means[0])
    for k in range(2, 6):
        assert torch.equal(acted[k], means[k - 1]), (k, acted[k], means)


@pytest.mark.slow  # ~8 s on a loaded 2-core box; the plain CartPole case above covers the transport
def test_self_play_on_ray_equals_the_serial_games_with_league_and_bots(local_ray):
    pytest.importorskip("pyspiel")
    from rl_lightning.data.actors.recipes import SelfPlayRecipe
    from rl_lightning.data.selfplay import SelfPlay
    from rl_lightning.envs.games import OpenSpielEnv

    env = OpenSpielEnv("open_spiel:tic_tac_toe")
    league = {"size": 2, "snapshot_every_n_updates": 1, "share": 0.5, "bots": {"random": 0.25}}
    module = PPO(env_spec=env.spec, hidden_sizes=(16,))
    settings = PoolSettings(1, 4, 12, 1, 3, 60.0, 100)
    recipe = lambda: SelfPlayRecipe(env, None, league, None)  # noqa: E731 - the pool calls it at each start
    from_actor = _rollouts(RayActorPool(settings, env, module.policy_factory(), module.state_dict(), recipe), module, 3)
    selfplay = SelfPlay(env, None, league)
    collector = selfplay.collector(BatchedEnv(env, 4, "cpu", 100), 100 + 10_007, module)
    policy = module.acting_policy(collector.env, training=True)
    # a Ray request carries the version published when it was sent: 0, 0, then 1 (one request in flight)
    assert [int(batch["policy_version"].max()) for batch in from_actor] == [0, 0, 1]
    for actor_batch in from_actor:
        version = int(actor_batch["policy_version"].max())
        module.updates = module.policy_version = version
        selfplay.before_rollout(module)
        _assert_same(actor_batch, collector.rollout(policy, 12, version))


class _PidsAtEnd(Callback):
    def on_train_end(self, trainer, pl_module) -> None:
        self.pids = trainer.datamodule.actors.pids


def _gone(pids: list[int], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(pid_alive(pid) for pid in pids)


class _KillActorsAfter(Callback):
    """``ray.kill`` every Ray actor of the run once ``updates`` updates are done (once); keeps their pids."""

    def __init__(self, updates: int) -> None:
        self.updates = updates
        self.killed: list[int] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        pool = trainer.datamodule.actors
        if pl_module.updates == self.updates and not self.killed:
            self.killed = pool.pids
            for actor in pool.actors:
                ray.kill(actor.handle)


def test_a_ray_actor_killed_mid_fit_is_replaced_and_the_fit_completes_its_budget(local_ray, tmp_path):
    module, datamodule = tiny_ppo(total_env_steps=10 * 64, update_epochs=1)
    datamodule.num_actors, datamodule.actor_backend = 1, "ray"
    kill, end = _KillActorsAfter(3), _PidsAtEnd()
    with _deadline(300):  # an actor never replaced would leave the learner waiting forever (a loaded box: minutes)
        trainer(tmp_path, callbacks=[kill, end]).fit(module, datamodule)
    assert datamodule.local_env_steps == 10 * 64
    assert module.updates == 10  # the lost rollout added no env steps: the budget still buys 10 whole updates
    assert datamodule.state_dict()["actor_generation"] == 2  # the replacement drew the next seeds
    assert kill.killed
    assert not any(pid_alive(pid) for pid in kill.killed)
    assert set(end.pids).isdisjoint(kill.killed)
    assert _gone(end.pids)  # the replacement, ray.kill-ed at the end of the fit though Ray itself stays up
    stats = datamodule.last_rollout.stats
    assert stats["actors/restarts"] == 1.0
    assert stats["actors/lost_rollouts"] == 1.0  # the request it was collecting when it died
    assert stats["actors/dropped_rollouts"] == 0.0  # nothing was received whole and dropped as too stale
    assert datamodule.actors is None  # closed at the end of the fit
    assert ray.is_initialized()  # not the pool's session: left running


def test_no_rollout_lags_more_than_max_policy_lag_and_a_staler_one_is_dropped(local_ray):
    env = CartPole()
    module = PPO(env_spec=env.spec, hidden_sizes=(16,))
    pool = RayActorPool(PoolSettings(1, 4, 8, 2, 3, 60.0, 100), env, module.policy_factory(), module.state_dict())
    try:
        lags = []
        for version in range(5):
            pool.publish(module.state_dict(), version)
            lags.append(version - int(pool.next_rollout(version).batch["policy_version"].min()))
        assert pool.dropped_rollouts == 0
        pool.publish(module.state_dict(), 9)  # the learner jumped: both requests in flight (version 4) are stale
        jumped = pool.next_rollout(9)
        pids = pool.pids
    finally:
        pool.close()
    assert _gone(pids)  # ray.kill-ed by close(), while the pool (holding their handles) is still alive
    assert lags == [0, 1, 2, 2, 2]  # two requests in flight: the actor ran as far ahead as allowed, no further
    assert pool.dropped_rollouts == 2
    assert jumped.stats["actors/dropped_rollouts"] == 2.0
    assert jumped.env_steps == 3 * 4 * 8  # the dropped rollouts were collected whole: their env steps count
    assert int(jumped.batch["policy_version"].min()) == 9


@pytest.mark.usefixtures("_ray_for_the_module")  # it leaves a later session to the module's end
def test_an_env_broken_for_good_stops_after_max_failures_in_a_row_and_ray_is_shut_down(tmp_path):
    if ray.is_initialized():
        ray.shutdown()  # this pool starts its own local instance
    env = BreaksForGoodCartPole(str(tmp_path / "broken"), fail_at=20)  # in the 2nd rollout, then at every start
    module = PPO(env_spec=env.spec, hidden_sizes=(16,))
    settings = PoolSettings(1, 4, 16, 1, 2, 60.0, 100)
    pool = RayActorPool(settings, env, module.policy_factory(), module.state_dict())
    raylets = [pid for pid in _descendants(os.getpid()) if b"raylet" in _command(pid)]
    try:
        pool.publish(module.state_dict(), 0)
        pool.next_rollout(0)
        with pytest.raises(EnvError) as info, _deadline(120):  # not replaced for ever
            pool.next_rollout(0)
    finally:
        pool.close()
    assert raylets
    assert not ray.is_initialized()
    assert _gone(raylets)
    line = str(info.value)
    assert "\n" not in line
    assert "env 'CartPole'" in line, line
    assert "failed 2 times in a row" in line, line
    assert "RuntimeError: simulator broke at call 1" in line, line
    assert pool.restarts == 1
    # the pool's exit finalizer was spent by close(): dropping the pool later leaves the Ray session of that time alone
    init_ray(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="warning")
    del pool, info  # the traceback holds the pool too
    gc.collect()
    assert ray.is_initialized()


def test_the_learners_own_ray_node_gone_stops_collection_with_one_line_naming_it(local_ray, monkeypatch):
    """Ray's core worker ends a driver whose node's raylet died with exit code 1 and no Python error, at its next call
    into that node; the pool looks first and raises the run's one line (``FaultCheckpoint`` then saves the last
    update, as for any actor failure: the real thing, killing a cluster head under a CLI fit, is in
    ``tests/test_ray_cluster.py``)."""
    env = CartPole()
    module = PPO(env_spec=env.spec, hidden_sizes=(16,))
    pool = RayActorPool(SETTINGS, env, module.policy_factory(), module.state_dict())
    try:
        whats = {process.what for process in pool._local.processes}
        assert whats == {"the raylet of the Ray node this learner runs on", "the Ray head's GCS server"}
        assert pool._local.gone() == ""
        pool.publish(module.state_dict(), 0)
        pool.next_rollout(0)
        raylet = next(p for p in pool._local.processes if "raylet" in p.what)
        monkeypatch.setattr(type(raylet), "alive", lambda process: process is not raylet)  # as if it were SIGKILLed
        with pytest.raises(EnvError) as info:
            pool.next_rollout(0)
        with pytest.raises(EnvError):
            pool.publish(module.state_dict(), 1)  # a ray.put into its object store would end the process
    finally:
        monkeypatch.undo()
        pool.close()
    line = str(info.value)
    assert "\n" not in line
    assert line == (
        f"env 'CartPole' collected by Ray actors: the raylet of the Ray node this learner runs on (pid {raylet.pid}) "
        "died, so the run cannot go on (start the Ray cluster again to resume)"
    )


def test_the_cpu_check_counts_the_actors_of_every_ddp_rank_against_the_shared_cluster(local_ray):
    cluster_of_two = SimpleNamespace(ray_address="head:6379", num_actors=2, world_size=2, trainer=None)
    with pytest.raises(ConfigError) as info:
        check_ray_cluster(cluster_of_two)  # connected already (local_ray): its 2 CPUs, for 2 ranks x 2 actors
    assert str(info.value) == (
        "data.num_actors=2 on each of 2 DDP ranks with data.actor_backend=ray needs 4 CPUs (one per actor) but the "
        "Ray cluster at 'head:6379' has 2; use at most 1 actors per rank, or add nodes (`ray start --address ...`)"
    )
    check_ray_cluster(SimpleNamespace(ray_address="head:6379", num_actors=1, world_size=2, trainer=None))
    refuse_too_many_actors(2, 2.0, None)  # one rank: 2 actors on 2 CPUs fit


def _ddp_datamodule(ranks_per_machine: int) -> SimpleNamespace:
    machine = SimpleNamespace(num_devices=ranks_per_machine)
    return SimpleNamespace(ray_address=None, num_actors=1, world_size=2, trainer=machine)


def test_a_local_ray_instance_per_ddp_rank_on_one_machine_is_refused(monkeypatch):
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh rank process
    with pytest.raises(ConfigError) as info:
        check_ray_cluster(_ddp_datamodule(2))
    assert str(info.value).startswith(
        "data.ray_address=null starts a local Ray instance in each of the 2 DDP ranks on this machine, each claiming "
        "every core; start one cluster (`ray start --head`"
    )
    # one rank per machine (num_nodes 2, devices 1): each local instance has its own machine's cores
    check_ray_cluster(_ddp_datamodule(1))


@pytest.mark.slow  # ~20 s: a two-rank gloo fit that stops at setup
def test_ddp_with_a_local_ray_instance_per_rank_is_refused_in_one_line_through_the_cli(tmp_path):
    args = _cli_args(tmp_path, "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu")
    result = run_cli(args, tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    lines = {line for line in result.stderr.splitlines() if line.startswith(ERROR_PREFIX)}  # the same on each rank
    assert len(lines) == 1, result.stderr[-3000:]
    assert "data.ray_address=null starts a local Ray instance in each of the 2 DDP ranks" in lines.pop()
    assert not list(tmp_path.rglob("*.ckpt"))


def test_a_local_ray_instance_starts_without_rays_token_notice(monkeypatch):
    """Ray 2.60 says "Token authentication is enabled for this Ray cluster" at every new local instance, so at every
    local Ray fit; the run drops it (docs/guides/ray.md says what the token is for). Anything else Ray prints stays."""
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)  # as a user has it (a local instance in this process set it)
    code = (
        "import ray; from rl_lightning.data.actors.ray_checks import connect; connect(None); "
        "print('mode', __import__('os').environ.get('RAY_AUTH_MODE')); ray.shutdown()"
    )
    result = run_python(["-c", code])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "mode token" in result.stdout  # token authentication is on all the same
    assert "Token authentication" not in result.stderr, result.stderr


def _command(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _cli_args(tmp_path, *extra: str) -> list[str]:
    return [
        "fit", "--config", "ppo",
        "--data.init_args.num_envs", "4", "--data.init_args.num_steps", "16",
        "--data.init_args.total_env_steps", "640", "--data.init_args.num_actors", "1",
        "--data.init_args.actor_backend", "ray",
        "--model.init_args.hidden_sizes", "[16]",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
        *extra,
    ]  # fmt: skip


def _more_actors_than_cores() -> list[str]:
    n = len(os.sched_getaffinity(0)) + 1
    return ["--data.init_args.num_envs", str(n), "--data.init_args.num_actors", str(n)]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--data.init_args.ray_address", "127.0.0.1:1"], "data.ray_address='127.0.0.1:1': nothing answers there"),
        (["--data.init_args.ray_address", "ray://head:10001"], "data.ray_address='ray://head:10001' is invalid"),
        (_more_actors_than_cores(), "CPUs (one per actor) but the local Ray instance has"),
        (["--data.init_args.env", "tests.actor_envs.LockedCartPole"], "into each Ray actor, but LockedCartPole"),
        (["--data.init_args.actor_backend", "rey"], "data.actor_backend='rey' is invalid: choose one of"),
        (
            ["--data.init_args.num_actors", "0"],
            "data.actor_backend='ray' runs the actors as Ray actors, but data.num_actors=0 starts none",
        ),
    ],
    ids=["unreachable", "client-address", "actors-over-cpus", "unpicklable-env", "backend-typo", "no-actors"],
)
def test_bad_ray_settings_are_refused_in_one_line_before_anything_starts(tmp_path, extra, expected):
    result = run_cli(_cli_args(tmp_path, *extra), tmp_path)
    assert result.returncode == 2, result.stderr
    assert expected in error_line(result)
    assert not list(tmp_path.rglob("*.ckpt"))


def test_the_ray_backend_without_ray_names_the_extra(monkeypatch):
    from rl_lightning.data.actors.setup import check_actor_config

    module, datamodule = tiny_ppo()
    datamodule.num_actors, datamodule.actor_backend = 1, "ray"
    monkeypatch.setitem(sys.modules, "ray", None)  # what an install without the extra sees: ImportError
    with pytest.raises(ConfigError) as info:
        check_actor_config(datamodule, module)
    assert str(info.value) == 'data.actor_backend=ray needs Ray, which is not installed: pip install -e ".[ray]"'
