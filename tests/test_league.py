"""The league: snapshots every N updates, a pool of the last K, per-game draws that are seeded and checkpointed."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning import keys
from rl_lightning.callbacks import RLCheckpoint
from rl_lightning.data.league import League, SeatPlayers
from rl_lightning.data.selfplay import PLAYER
from rl_lightning.lineage import weights_digest
from tests.helpers import trainer
from tests.selfplay_toys import TurnToy
from tests.test_selfplay import Rollouts, tiny_selfplay

LEAGUE = {"size": 1, "snapshot_every_n_updates": 2, "share": 0.5}


def test_league_games_keep_one_learning_seat_and_draw_filled_slots():
    league = League(size=3, snapshot_every_n_updates=1, share=1.0)
    league.slots, league.ids = [object(), object()], [0, 1]  # two snapshots taken so far
    players = SeatPlayers(["self", "self", "random", "self"], league, torch.device("cpu"))
    table = players.assign(500)
    assert (table[:, 2] == 1).all()  # the random seat keeps its bot (player 1)
    self_seats = table[:, [0, 1, 3]]
    assert ((self_seats == 0).sum(1) == 1).all()  # share 1.0: exactly one learning seat per game
    snapshots = self_seats[self_seats != 0]
    assert set(snapshots.unique().tolist()) == {2, 3}  # league ids 2.. for the two filled slots only
    counts = torch.bincount((self_seats == 0).int().argmax(1), minlength=3)
    assert counts.min() > 120  # the learning seat is uniform over the self seats
    league.share = 0.0
    assert (players.assign(100)[:, [0, 1, 3]] == 0).all()


def test_snapshots_every_n_updates_keep_the_last_k(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_selfplay(league={"size": 2, "snapshot_every_n_updates": 2, "share": 0.5}, total_env_steps=280,
                               num_steps=10)  # fmt: skip
    trainer(tmp_path).fit(module, dm)
    league = dm.selfplay.league
    assert module.updates == 7
    assert league.last_snapshot_update == 6  # taken before updates 0, 2, 4, 6
    assert sorted(league.versions) == [4, 6]  # the oldest (0, 2) dropped
    newest = league.slots[league.versions.index(6)]
    assert not any(p.requires_grad for p in newest.parameters())


def _fit(tmp_path, updates, ckpt_path=None):
    pl.seed_everything(11)
    module, dm = tiny_selfplay(league=LEAGUE, seats={2: "league"}, num_steps=5, total_env_steps=20 * updates,
                               num_minibatches=1)  # games straddle rollouts: a retired snapshot plays on
    rollouts = Rollouts()
    checkpoint = RLCheckpoint(every_n_updates=1, dirpath=str(tmp_path / "ckpt"), save_last=True)
    trainer(tmp_path, callbacks=[rollouts, checkpoint], enable_checkpointing=True).fit(module, dm, ckpt_path=ckpt_path)
    return module, [batch[PLAYER] for batch in rollouts.batches], dm.selfplay.league


def _pool(league):
    return {"versions": league.versions, "ids": league.ids, "taken": league.taken,
            "last_snapshot_update": league.last_snapshot_update,
            "weights": [weights_digest(slot) for slot in league.slots],
            "retired": {n: weights_digest(slot) for n, slot in league.retired.items()}}  # fmt: skip


def test_resume_continues_the_same_opponent_stream(tmp_path):
    straight, straight_players, straight_league = _fit(tmp_path / "a", 6)
    _, first, first_league = _fit(tmp_path / "b", 3)
    assert list(first_league.retired) == [0]  # the checkpoint's games still play the snapshot out of the pool
    with pytest.warns(UserWarning, match="exists and is not empty"):
        resumed, rest, resumed_league = _fit(tmp_path / "b", 6, ckpt_path=str(tmp_path / "b" / "ckpt" / "last.ckpt"))
    assert len(first) == 3
    assert len(rest) == 3
    league_ids = torch.cat(straight_players)
    assert (league_ids >= 1).any()  # opponents were drawn from the league ...
    assert len(league_ids[league_ids >= 1].unique()) >= 2  # ... from more than one snapshot
    for a, b in zip(straight_players, first + rest):
        assert torch.equal(a, b)
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)
    assert straight_league.last_snapshot_update == 4  # snapshots before updates 0, 2 and 4
    assert straight_league.ids == [2]
    assert _pool(resumed_league) == _pool(straight_league)  # the pool and its clock survive the resume


class SnapshotPlay(Callback):
    """Per update: the rollout's ticks, and the weights each league player id stood for while it was collected."""

    def __init__(self):
        self.ticks, self.digests = [], []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        players = trainer.datamodule.selfplay.players
        first = players.league_first_id
        self.ticks.append(trainer.datamodule.last_rollout.batch[3:].clone())
        self.digests.append({player: weights_digest(actor.module) for player, actor in players.acting()
                             if player >= first})  # fmt: skip


def test_a_full_pool_never_changes_a_running_games_opponent_nor_reuses_an_id(tmp_path):
    """A pool of one snapshot, replaced every update, while games span several 3-tick rollouts: each game's league
    seat plays one snapshot to its end, and a player id always names the same weights."""
    pl.seed_everything(3)
    league = {"size": 1, "snapshot_every_n_updates": 1}
    module, dm = tiny_selfplay(league=league, seats={2: "league"}, num_steps=3, total_env_steps=4 * 3 * 10,
                               num_minibatches=1, env=TurnToy(3, p_end=0.05, max_episode_steps=9))  # fmt: skip
    play = SnapshotPlay()
    trainer(tmp_path, callbacks=[play]).fit(module, dm)
    named: dict[int, str] = {}  # player id -> the weights it stood for, over the whole run
    spans = 0
    for ticks, digests in zip(play.ticks, play.digests):
        for player, digest in digests.items():
            assert named.setdefault(player, digest) == digest, f"player id {player} named other weights"
        acted = ticks[PLAYER][ticks[keys.SEAT] == 2]
        assert set(acted.tolist()) <= set(digests), "a league seat acted under an id with no snapshot"
    for b in range(4):  # along each row: a game's league seat keeps its player id from its first tick to its end
        rows = torch.cat([ticks[:, b] for ticks in play.ticks])
        game = rows[keys.IS_FIRST].long().cumsum(0)
        for g in game.unique().tolist():
            ids = rows[PLAYER][(game == g) & (rows[keys.SEAT] == 2)].unique()
            assert len(ids) <= 1, f"row {b}: a game's league seat changed player id: {ids.tolist()}"
            spans += int(len(ids) == 1 and len(rows[(game == g)]) > 2)
    assert spans > 0  # games spanned rollouts
    assert len(named) > 2  # a new id per snapshot, the old ones kept while their games ran
    assert len(dm.selfplay.league.slots) == 1


def test_a_checkpoint_seat_plays_that_frozen_policy_and_never_trains(tmp_path):
    pl.seed_everything(2)
    first, dm = tiny_selfplay(total_env_steps=80)
    trainer(tmp_path / "a", enable_checkpointing=False).fit(first, dm)
    path = tmp_path / "opponent.ckpt"
    first.trainer.save_checkpoint(str(path))
    module, dm = tiny_selfplay(total_env_steps=80, seats={1: str(path)})
    rollouts = Rollouts()
    trainer(tmp_path / "b", callbacks=[rollouts]).fit(module, dm)
    players = dm.selfplay.players
    assert players.fixed_ids == {str(path): 1}
    for batch in rollouts.batches:
        ticks = batch[3:]
        seat1 = ticks["seat"] == 1
        assert (ticks[PLAYER][seat1] == 1).all()
        assert not batch["train"][3:][seat1].any()
    # The opponent acts as the checkpoint's policy (the same draws give the same sampled actions), frozen.
    obs = rollouts.batches[-1][3:][seat1].select("obs", "action_mask")
    loaded = type(module).load_from_checkpoint(str(path), weights_only=False)
    expected = loaded.act(obs, torch.Generator().manual_seed(0))["action"]
    assert torch.equal(players.actors[1](obs, torch.Generator().manual_seed(0)), expected)
    opponent = players.actors[1].module
    assert opponent is not module
    assert not any(p.requires_grad for p in opponent.parameters())
    for a, b in zip(opponent.state_dict().values(), first.state_dict().values()):
        assert torch.equal(a, b)  # the checkpoint's weights, unchanged by the second run's updates


def test_league_bots_take_their_share_of_games_with_one_learning_seat_kept():
    league = League(size=2, snapshot_every_n_updates=1, share=0.25, bots={"random": 0.25})
    league.slots, league.ids = [object()], [0]
    league.generator.manual_seed(0)
    players = SeatPlayers(["self", "self"], league, torch.device("cpu"))
    table = players.assign(4000)
    random_id, snapshot_id = players.fixed_ids["random"], players.league_first_id
    assert ((table == 0).sum(1) >= 1).all()  # every game keeps a learning seat
    vs_random = (table == random_id).any(1).float().mean().item()
    vs_snapshot = (table == snapshot_id).any(1).float().mean().item()
    assert abs(vs_random - 0.25) < 0.03
    assert abs(vs_snapshot - 0.25) < 0.03
    assert not ((table == random_id).any(1) & (table == snapshot_id).any(1)).any()  # one opponent kind per game
    league.generator.manual_seed(0)
    without_bots = SeatPlayers(["self", "self"], League(size=2, snapshot_every_n_updates=1, share=0.25), "cpu")
    without_bots.league.slots, without_bots.league.ids = [object()], [0]
    without_bots.league.generator.manual_seed(0)
    plain = without_bots.assign(4000)
    snap = without_bots.league_first_id
    assert torch.equal(plain == snap, table == snapshot_id)  # adding bots leaves the league's own draws unchanged


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"share": 0.6, "bots": {"random": 0.5}}, "data.league.bots"), ({"bots": {"self": 0.1}}, "data.league.bots"),
     ({"bots": {"nonsense": 0.1}}, "data.league.bots")],
)
def test_bad_league_bots_fail_with_one_line(kwargs, field):
    from rl_lightning.errors import ConfigError

    with pytest.raises(ConfigError, match=field) as err:
        League(**kwargs)
    assert "\n" not in str(err.value)
