"""Actors on Ray (``data.actor_backend: ray``) on a local Ray instance: the rollout they collect, a killed actor
replaced mid-fit, an env broken for good, and the settings refused before anything starts."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning.algos import PPO
from rl_lightning.child_processes import pid_alive
from rl_lightning.data.actors import ActorPool, PoolSettings
from rl_lightning.envs import CartPole
from rl_lightning.errors import ConfigError, EnvError
from tests.actor_envs import BreaksForGoodCartPole
from tests.cli_subprocess import error_line, run_cli
from tests.helpers import tiny_ppo, trainer
from tests.test_actors import _deadline
from tests.test_actors_cli import _descendants

ray = pytest.importorskip("ray")

from rl_lightning.data.actors.ray_checks import init_ray  # noqa: E402 - needs Ray
from rl_lightning.data.actors.ray_pool import RayActorPool  # noqa: E402

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


@pytest.mark.slow  # ~8 s on a loaded 2-core box; the plain CartPole case above covers the transport
def test_self_play_on_ray_equals_the_serial_games_with_league_and_bots(local_ray):
    pytest.importorskip("pyspiel")
    from rl_lightning.data.actors.recipes import SelfPlayRecipe
    from rl_lightning.data.selfplay import SelfPlay
    from rl_lightning.envs.base import BatchedEnv
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
    assert datamodule.state_dict()["actor_generation"] == 2  # the replacement drew the next seeds
    assert kill.killed
    assert not any(pid_alive(pid) for pid in kill.killed)
    assert set(end.pids).isdisjoint(kill.killed)
    assert _gone(end.pids)  # the replacement, ray.kill-ed at the end of the fit though Ray itself stays up
    stats = datamodule.last_rollout.stats
    assert stats["actors/restarts"] == 1.0
    assert stats["actors/dropped_rollouts"] >= 1.0  # the request in flight when the actor died
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
    ],
    ids=["unreachable", "client-address", "actors-over-cpus", "unpicklable-env", "backend-typo"],
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
