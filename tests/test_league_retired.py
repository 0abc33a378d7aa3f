"""Retired league snapshots are let go when no game plays them, also when actor processes collect (issue 56, bug 4),
and never recycled under a background ``GameEvaluation`` that still plays one."""

from __future__ import annotations

from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning.algos import PPO
from rl_lightning.callbacks import GameEvaluation
from rl_lightning.data import OnPolicyDataModule
from rl_lightning.data.actors.recipes import SelfPlayRecipe
from rl_lightning.data.league import League, frozen_copy
from rl_lightning.data.selfplay import SelfPlay
from rl_lightning.envs.base import BatchedEnv
from rl_lightning.lineage import weights_digest
from tests.game_match_toys import HighCard
from tests.helpers import trainer

#: A pool of two snapshots replaced every update: a snapshot retires at every update from the third on.
LEAGUE = {"size": 2, "snapshot_every_n_updates": 1, "share": 0.5}
UPDATES = 12


def held(league: League) -> int:
    """The snapshot modules the league keeps alive: its pool, the retired ones, the spares kept for reuse."""
    return len(league.slots) + len(league.retired) + len(league._spare)


class HeldPerUpdate(Callback):
    """The learner's league after each update: ``(snapshots taken, retired snapshots kept, modules held)``."""

    def __init__(self) -> None:
        self.counts: list[tuple[int, int, int]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        league = trainer.datamodule.selfplay.league
        self.counts.append((league.taken, len(league.retired), held(league)))


def _fit_tic_tac_toe(tmp_path, num_actors: int) -> list[tuple[int, int, int]]:
    pytest.importorskip("pyspiel")
    from rl_lightning.envs.games import OpenSpielEnv

    pl.seed_everything(0)
    dm = OnPolicyDataModule(OpenSpielEnv("open_spiel:tic_tac_toe"), num_envs=4, num_steps=8,
                            total_env_steps=UPDATES * 32, league=LEAGUE, num_actors=num_actors)  # fmt: skip
    module = PPO(env_spec=dm.env_spec, hidden_sizes=(16,), update_epochs=1, num_minibatches=1)
    counts = HeldPerUpdate()
    trainer(tmp_path, callbacks=[counts]).fit(module, dm)
    return counts.counts


def test_with_an_actor_the_learners_league_holds_no_more_snapshots_than_serially(tmp_path) -> None:
    serial = _fit_tic_tac_toe(tmp_path / "serial", num_actors=0)
    with_actor = _fit_tic_tac_toe(tmp_path / "actor", num_actors=1)
    assert len(with_actor) == len(serial) == UPDATES
    assert [taken for taken, _, _ in with_actor] == [taken for taken, _, _ in serial] == list(range(1, UPDATES + 1))
    assert max(retired for _, retired, _ in serial) >= 1  # serially a retired snapshot plays on in its games
    assert [retired for _, retired, _ in with_actor] == [0] * UPDATES  # no game of the learner plays one
    assert max(n for _, _, n in with_actor) <= max(n for _, _, n in serial) == 4  # bounded, not one more per update


def _tic_tac_toe_ppo():
    pytest.importorskip("pyspiel")
    from rl_lightning.envs.games import OpenSpielEnv

    env = OpenSpielEnv("open_spiel:tic_tac_toe")
    return env, PPO(env_spec=env.spec, hidden_sizes=(16,))


def test_an_actors_league_mirror_releases_what_the_serial_league_releases() -> None:
    """The actor's collector, built from ``SelfPlayRecipe`` as the actor process builds it, against the serial
    path's ``SelfPlay`` collector with the same seeds: the same snapshots kept after every rollout."""
    env, module = _tic_tac_toe_ppo()
    recipe = SelfPlayRecipe(env, None, LEAGUE, None)
    mirror = recipe.build(BatchedEnv(env, 4, "cpu", 100), 100 + 10_007, module)
    selfplay = SelfPlay(env, None, LEAGUE)
    serial = selfplay.collector(BatchedEnv(env, 4, "cpu", 100), 100 + 10_007, module)
    policy = module.acting_policy(serial.env, training=True)
    kept = []
    for version in range(UPDATES):
        module.updates = module.policy_version = version
        recipe.before_rollout(module)
        mirror.rollout(recipe.policy(module, mirror.env), 8, version)
        selfplay.before_rollout(module)
        serial.rollout(policy, 8, version)
        kept.append((sorted(recipe._selfplay.league.retired), held(recipe._selfplay.league)))
        assert kept[-1] == (sorted(selfplay.league.retired), held(selfplay.league))
    assert max(n for _, n in kept) <= 4
    assert any(retired for retired, _ in kept)  # the comparison covers retired snapshots, not empty lists only


def _set_policy(module: PPO, action: int) -> None:
    """Make ``module`` play ``action`` wherever it is legal (a policy of its own, for telling snapshots apart)."""
    with torch.no_grad():
        module.actor[-1].weight.zero_()
        module.actor[-1].bias.copy_(torch.full((3,), -50.0).index_fill(0, torch.tensor(action), 50.0))


def test_a_snapshot_a_background_evaluation_still_plays_is_not_recycled(monkeypatch) -> None:
    """The learner's league while actors collect: its pool's two snapshots are in a background evaluation's panel
    when four more snapshots push them out of the pool; its games must still meet them as they were."""
    env = HighCard(seats=2, seat_bonus=0.0)
    module = PPO(env_spec=env.spec, hidden_sizes=(8,), update_epochs=1, num_minibatches=1)
    monkeypatch.setattr(PPO, "env_steps", property(lambda self: 40))
    selfplay = SelfPlay(env, None, LEAGUE)  # no collector: this process plays none of the league's games
    for version, action in enumerate((0, 1)):
        _set_policy(module, action)
        module.updates = module.policy_version = version
        selfplay.before_rollout(module)
    panel = list(selfplay.league.slots)
    digests = [weights_digest(slot) for slot in panel]
    callback = GameEvaluation(every_n_env_steps=32, opponents=["league"], num_games=200, rating_games=0, env=env,
                              deterministic=True, background=True)  # fmt: skip
    stub = SimpleNamespace(loggers=[], callback_metrics={}, datamodule=SimpleNamespace(selfplay=selfplay))
    as_due = callback.measure(stub, frozen_copy(module))
    callback._start_background(stub, module)  # resolves its panel now; plays only in the learner's waits
    _set_policy(module, 2)  # the later snapshots play 2: a panel snapshot reloaded with their weights would show
    for version in range(2, 6):  # each snapshot retires one: both panel ones go
        module.updates = module.policy_version = version
        selfplay.before_rollout(module)
    assert selfplay.league.ids == [4, 5]  # the panel's two snapshots left the pool ...
    assert not selfplay.league.retired  # ... and were let go
    assert [weights_digest(slot) for slot in panel] == digests  # ... and not reloaded for the later snapshots
    callback._log_pending(stub)
    record = callback.history[-1]
    assert set(as_due) == {key for key in record if key.startswith("eval/")}
    assert {key.split("/")[1] for key in as_due} == {"vs_league_v0", "vs_league_v1"}
    for key, value in as_due.items():
        assert record[key] == pytest.approx(value, nan_ok=True), key
