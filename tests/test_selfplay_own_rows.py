"""League snapshots and bots act on their own rows only, and a frozen player never computes its value."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.league import ModuleActor
from rl_lightning.data.selfplay import PLAYER
from tests.helpers import trainer
from tests.selfplay_toys import RowCountingBot
from tests.test_selfplay import Rollouts, tiny_selfplay


class ForgetStartUpProbes(pl.Callback):
    """Drops the bot calls of the start-up check that a bot fits the game (``check_bot_fits``): not play."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        RowCountingBot.calls.clear()


def test_league_and_bot_seats_see_only_their_own_rows(tmp_path, monkeypatch):
    """Each opponent is called once per tick on exactly the rows its seats act in (none: not called)."""
    snapshot_calls: list[int] = []
    original = ModuleActor.__call__

    def counting(self, obs, generator):
        snapshot_calls.append(int(obs.batch_size[0]))
        return original(self, obs, generator)

    monkeypatch.setattr(ModuleActor, "__call__", counting)
    RowCountingBot.calls.clear()
    pl.seed_everything(3)
    bot = "tests.selfplay_toys:RowCountingBot"
    league = {"size": 2, "snapshot_every_n_updates": 1, "share": 0.4, "bots": {bot: 0.4}}
    module, dm = tiny_selfplay(league=league, total_env_steps=200)
    rollouts = Rollouts()
    trainer(tmp_path, callbacks=[ForgetStartUpProbes(), rollouts]).fit(module, dm)
    bot_id = dm.selfplay.players.fixed_ids[bot]
    seats = dm.env_spec.num_seats
    ticks = torch.cat([batch[seats:][PLAYER] for batch in rollouts.batches])  # [T, B] who acted, tick by tick
    want_bot = [int(n) for n in (ticks == bot_id).sum(1) if n > 0]
    want_snapshots = [int(n) for tick in ticks for p in tick.unique().tolist() if p > bot_id
                      for n in [(tick == p).sum()]]  # fmt: skip
    assert RowCountingBot.calls == want_bot
    assert snapshot_calls == want_snapshots
    assert sum(want_bot) > 0
    assert sum(want_snapshots) > 0
    assert max(want_snapshots) < ticks.shape[1]  # a snapshot never computes the whole batch


def test_a_frozen_player_never_computes_its_value():
    def no_critic(*args):
        raise AssertionError("the critic ran")

    rows = TensorDict({keys.OBS: torch.zeros(5, 7), keys.ACTION_MASK: torch.ones(5, 3, dtype=torch.bool)}, [5])
    learner, frozen = tiny_selfplay()[0], tiny_selfplay()[0]
    for module in (learner, frozen):
        module._value_when_acting = True  # as a PPO whose actor and critic share a CNN
        module.critic.forward = no_critic
    with pytest.raises(AssertionError, match="the critic ran"):
        learner.act(rows, torch.Generator().manual_seed(0))  # the learning policy needs its values
    assert ModuleActor(frozen)(rows, torch.Generator().manual_seed(0)).shape == (5,)
