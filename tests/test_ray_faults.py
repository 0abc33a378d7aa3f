"""Ray actors that fail, through ``rl-lightning fit`` as a user runs it (a local Ray instance of the run's own): an env
that raises every few rollouts, a hung env. What the user sees: the exit code, one line per replacement and the
end-of-run count, the checkpoint's counters (the exact budget), and no Ray process left behind. Each fit starts Ray
(~15-30 s on two cores): the slow tier. An env broken for good, a killed actor and lost nodes are in
``tests/test_ray_actors.py`` and ``tests/test_ray_cluster.py``."""

from __future__ import annotations

import json

import pytest

from tests.test_actor_faults_ddp import assert_gone, watched
from tests.test_actors_cli import ROLLOUT, _args, _last_checkpoint, _scalars

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow

ON_RAY = ["--data.init_args.actor_backend", "ray"]


def _replaced(out: str) -> list[str]:
    return [line for line in out.splitlines() if " replaced with fresh seeds" in line]


@pytest.mark.parametrize("lag", [1, 2])
def test_a_ray_actors_env_that_raises_every_few_rollouts_is_replaced_each_time_and_the_fit_completes_its_budget(
    tmp_path, lag
):
    """Every actor's env raises at its 40th tick: two good rollouts of 16 ticks, then the third fails. Each good
    rollout resets the failure streak, so ``actor_max_failures: 2`` never stops the run: 12 updates take 6 actors,
    5 of them replacements, each said in one line; the 5 lost rollouts add no env steps."""
    env = {"class_path": "tests.actor_envs.RaisesInActorsCartPole", "init_args": {"fail_at": 40}}
    extra = ["--data.init_args.env", json.dumps(env), "--data.init_args.max_policy_lag", str(lag)]
    args = _args(tmp_path, 12 * ROLLOUT, *ON_RAY, *extra, "--data.init_args.actor_max_failures", "2")
    code, out, seen = watched(tmp_path, args)
    assert code == 0, out[-3000:]
    replaced = _replaced(out)
    assert len(replaced) == 5, out[-3000:]
    for restart, line in enumerate(replaced, 1):
        assert line.startswith(f"rl-lightning: actor 0 replaced with fresh seeds (restart {restart} of the run): ")
        assert "RuntimeError: contact solver diverged at call 40" in line, line
    assert "rl-lightning: actors: 5 replaced during the run, 5 rollout(s) lost with them" in out, out[-3000:]
    saved = _last_checkpoint(tmp_path, 0)
    assert saved["rl_counters"]["updates"] == 12
    assert saved["OnPolicyDataModule"]["local_env_steps"] == 12 * ROLLOUT
    assert saved["OnPolicyDataModule"]["actor_generation"] == 6  # every replacement drew the next seeds
    assert _scalars(tmp_path, "actors/restarts")[-1] == 5.0
    assert _scalars(tmp_path, "actors/lost_rollouts")[-1] == 5.0
    assert any(b"default_worker.py" in command for command in seen.values()), seen  # Ray workers ran below it...
    assert_gone(seen, within_s=20)  # ...and none is left: actors, raylet, GCS


def test_a_hung_ray_actor_is_replaced_after_the_heartbeat_and_the_fit_completes_its_budget(tmp_path):
    env = {"class_path": "tests.actor_envs.HangOnceCartPole",
           "init_args": {"marker": str(tmp_path / "hung"), "hang_at": 40}}  # fmt: skip
    extra = ["--data.init_args.env", json.dumps(env), "--data.init_args.actor_heartbeat_s", "3"]
    code, out, seen = watched(tmp_path, _args(tmp_path, 8 * ROLLOUT, *ON_RAY, *extra))
    assert code == 0, out[-3000:]
    replaced = _replaced(out)
    assert len(replaced) == 1, out[-3000:]
    assert "actor 0 replaced with fresh seeds (restart 1 of the run): no rollout for 3 s (hung env?)" in replaced[0]
    assert "rl-lightning: actors: 1 replaced during the run, 1 rollout(s) lost with them" in out, out[-3000:]
    saved = _last_checkpoint(tmp_path, 0)
    assert saved["rl_counters"]["updates"] == 8
    assert saved["OnPolicyDataModule"]["local_env_steps"] == 8 * ROLLOUT  # the hung rollout is not counted
    assert any(b"raylet" in command for command in seen.values()), seen
    assert_gone(seen, within_s=20)
