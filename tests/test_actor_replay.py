"""Replay modules with actors: SPO's acting buffers reach the actors before the first gradient step; a replaced
actor's first rows do not continue its predecessor's episodes in the ring."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data import ReplayDataModule
from rl_lightning.envs import CartPole
from tests.actor_envs import RaisesOnceCartPole
from tests.actor_replay_toys import spo_normaliser_fit
from tests.helpers import trainer


def test_spo_actors_act_with_the_normaliser_that_process_rollout_moved_before_any_gradient_step(tmp_path):
    """``normalize_obs``: ``process_rollout`` moves the statistics every update while ``learning_starts`` holds the
    version at 0; the actors must still get them. With one slot (lag 1) rollout ``k`` starts as the learner takes
    rollout ``k - 1``, after the publish of update ``k - 1``: it acts with the statistics of rollouts
    ``0..k-2`` (or ``0..k-1`` had the actor woken late), never with the initial ones from rollout 2 on."""
    acted, means = spo_normaliser_fit(tmp_path, "processes")
    assert torch.equal(acted[0], means[0])
    for k in range(2, 6):
        assert any(torch.equal(acted[k], means[j]) for j in (k - 1, k)), (k, acted[k], means)


def test_a_publish_of_the_same_version_reaches_readers_only_when_its_tensors_moved():
    """``SharedWeights``: the version tags rollouts and counts the lag; a publish that keeps it but moves a buffer
    still reaches every reader (once), and one that moves nothing reaches none."""
    import copy

    from rl_lightning.data.actors.weights import SharedWeights

    net = torch.nn.BatchNorm1d(3)  # parameters and buffers
    writer = SharedWeights(net.state_dict())
    reader = copy.copy(writer)  # an actor's own copy: the same shared buffers, its own last read
    mine = {name: tensor.clone() for name, tensor in net.state_dict().items()}
    assert reader.read_into(mine, -1) is None  # nothing published yet
    assert writer.publish(net.state_dict(), 0)
    assert reader.read_into(mine, -1) == 0
    assert reader.read_into(mine, 0) is None
    assert not writer.publish(net.state_dict(), 0)  # nothing moved: nothing new for the readers
    assert reader.read_into(mine, 0) is None
    net.running_mean.add_(1.0)  # an acting buffer moves without a gradient step
    assert writer.publish(net.state_dict(), 0)
    assert writer.version == 0
    assert reader.read_into(mine, 0) == 0  # loaded, still tagged 0
    assert torch.equal(mine["running_mean"], net.running_mean)
    assert reader.read_into(mine, 0) is None
    assert copy.copy(writer).read_into(mine, -1) == 0  # a reader that starts now (a replacement) gets them too
    net.weight.data.add_(1.0)
    assert writer.publish(net.state_dict(), 1)
    assert reader.read_into(mine, 0) == 1
    assert torch.equal(mine["weight"], net.weight.detach())


def _spo_with_actor(env, total_env_steps: int, **data_kwargs):
    from rl_lightning.algos import SPO

    dm = ReplayDataModule(
        env, num_envs=4, rollout_length=8, total_env_steps=total_env_steps, buffer_size=256, batch_size=4,
        sequence_length=4, gradient_steps=1, num_actors=1, **data_kwargs,
    )  # fmt: skip
    module = SPO(env_spec=dm.env_spec, hidden_sizes=(16,), num_particles=4, search_depth=2, resample_period=2)
    return module, dm


class _Restarts(pl.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.restarts = trainer.datamodule.actors.restarts


def test_a_replaced_spo_actor_does_not_continue_its_predecessors_episodes_in_the_ring(tmp_path):
    """The actor's env raises in its 2nd or 3rd rollout: its replacement starts fresh episodes (``is_first``) in the
    same ring columns, right after the predecessor's last (unfinished) rows. GAE(λ) stops its recursion only at
    ``terminated | truncated``, so a row followed by an episode's first row must carry one of them (the cut one:
    ``truncated``, bootstrapped from its ``final_obs`` as a time-limit cut), or the critic's targets there would run on
    into an unrelated episode."""
    pl.seed_everything(0)
    module, dm = _spo_with_actor(RaisesOnceCartPole(str(tmp_path / "raised"), fail_at=60), 6 * 32)
    restarts = _Restarts()
    trainer(tmp_path, callbacks=[restarts]).fit(module, dm)
    assert restarts.restarts == 1
    ring = dm.replay.state_dict(include_storage=True)  # 48 rows of 64: not wrapped, storage rows in time order
    rows = TensorDict(ring["storage"], batch_size=ring["storage_batch_size"])
    assert rows.batch_size[0] == 6 * 8
    starts = rows[keys.IS_FIRST][1:]
    ended = rows[keys.TERMINATED][:-1] | rows[keys.TRUNCATED][:-1]
    joined = starts & ~ended
    rollout_starts = starts[7::8]  # the first row of every rollout after the first
    assert rollout_starts.all(-1).any()  # the replacement's first rollout: every env resets
    assert not joined.any(), joined.nonzero().tolist()


def test_a_replaced_dreamer_actor_plays_the_player_not_the_random_prefill_again(tmp_path):
    """DreamerV3's actor plays uniform random actions while the run is in its prefill (``learning_starts``), then
    the player. Its env raises in its 3rd window, after the prefill: the replacement (the next seed generation)
    must start with the player, from the run's env-step count, not with the prefill again. The weights never
    move, so its first window equals a serial collector's with the replacement's seeds and the player, exactly."""
    from rl_lightning.algos import DreamerV3
    from rl_lightning.data import DreamerDataModule
    from rl_lightning.data.actors.gather import GENERATION_STRIDE
    from rl_lightning.data.sequence_collector import SequenceCollector
    from rl_lightning.envs.base import BatchedEnv
    from rl_lightning.envs.random_action import random_action

    env = RaisesOnceCartPole(str(tmp_path / "raised"), fail_at=20)  # window 0: calls 1-8, 1: 9-16, 2: 17-24
    dm = DreamerDataModule(
        env, num_envs=2, rollout_length=8, total_env_steps=128, buffer_size=256, batch_size=2, sequence_length=4,
        replay_ratio=0.25, learning_starts=16, commit_stride=2, num_actors=1, seed=100,
    )  # fmt: skip
    module = DreamerV3(env_spec=dm.env_spec, size="tiny", horizon=3, bins=15, warmup_steps=0)
    dm.setup("fit")
    try:
        windows = [dm.actor_rollout(module)[0] for _ in range(3)]  # the prefill's, the player's, the replacement's
        assert dm.actors.restarts == 1
    finally:
        dm.teardown("fit")
    seed = 100 + GENERATION_STRIDE  # actor 0 of seed generation 1
    collector = SequenceCollector(BatchedEnv(CartPole(), 2, "cpu", seed), seed=seed + 10_007)
    serial = collector.rollout(module.player(2, torch.device("cpu")), 8, 0)
    replacement = windows[2]
    assert sorted(replacement.keys(True, True)) == sorted(serial.keys(True, True))
    for name in serial.keys(True, True):
        assert torch.equal(replacement[name], serial[name]), name
    prefill = SequenceCollector(BatchedEnv(CartPole(), 2, "cpu", seed), seed=seed + 10_007).rollout(
        lambda view, gen: TensorDict({keys.ACTION: random_action(env.spec, view, gen)}, batch_size=view.batch_size),
        8, 0,
    )  # fmt: skip
    assert not torch.equal(replacement[keys.ACTION], prefill[keys.ACTION])  # what the mutation would have played
