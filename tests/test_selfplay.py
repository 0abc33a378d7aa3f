"""Self-play collection: seat map, learner mask, carried open decisions, opponents never train, bad seat maps."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import PPO
from rl_lightning.data import OnPolicyDataModule
from rl_lightning.data.selfplay import CARRIED, LEARNER, PLAYER
from rl_lightning.envs import CartPole
from rl_lightning.errors import ConfigError
from rl_lightning.objectives.seat_credit import seat_credit
from tests.helpers import trainer
from tests.selfplay_toys import TurnToy


def tiny_selfplay(num_steps=10, total_env_steps=200, seats=None, league=None, env=None, **model_kwargs):
    dm = OnPolicyDataModule(
        env or TurnToy(3, max_episode_steps=9), num_envs=4, num_steps=num_steps, total_env_steps=total_env_steps,
        seats=seats, league=league,
    )  # fmt: skip
    kwargs = {"hidden_sizes": (16,), "update_epochs": 2, "num_minibatches": 2, **model_kwargs}
    return PPO(env_spec=dm.env_spec, **kwargs), dm


class Rollouts(Callback):
    """Keeps each update's rollout (its players, actions and learning rows)."""

    def __init__(self):
        self.batches = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches.append(trainer.datamodule.last_rollout.batch.clone())


def _fit(tmp_path, module, dm, callbacks=(), **kwargs):
    trainer(tmp_path, callbacks=list(callbacks), **kwargs).fit(module, dm)


def test_rollout_rows_players_and_carried_open_decisions(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_selfplay(
        seats={1: "random", 2: "tests.selfplay_toys:LastLegalBot"}, total_env_steps=160, num_steps=20
    )
    rollouts = Rollouts()
    _fit(tmp_path, module, dm, [rollouts])
    seats = 3
    for batch in rollouts.batches:
        assert batch.batch_size == torch.Size([seats + 20, 4])
        ticks = batch[seats:]
        seat, player = ticks[keys.SEAT], ticks[PLAYER]
        assert torch.equal(player, torch.tensor([0, 1, 2])[seat])  # the seat map, every tick of every game
        assert torch.equal(ticks[LEARNER], seat == 0)
        legal = ticks[keys.ACTION_MASK].gather(-1, ticks[keys.ACTION].unsqueeze(-1)).squeeze(-1)
        assert legal.all()
        bot = seat == 2
        highest = (ticks[keys.ACTION_MASK] * torch.arange(3)).argmax(-1)
        assert torch.equal(ticks[keys.ACTION][bot], highest[bot])
        assert batch[CARRIED][:seats].all()
        assert not batch[CARRIED][seats:].any()
        assert not batch[LEARNER][1:seats].any()  # only seat 0 learns, so only its carried row can
    # Each update's carried row of seat 0 is the previous rollout's open decision of seat 0, with its reward so far.
    for before, after in zip(rollouts.batches, rollouts.batches[1:]):
        credit = seat_credit(before[keys.SEAT], before[keys.REWARD], before[keys.TERMINATED], before[keys.TRUNCATED],
                             before[keys.VALUE])  # fmt: skip
        for b in range(4):
            open_rows = (credit.open[:, b] & (before[keys.SEAT][:, b] == 0)).nonzero().flatten().tolist()
            assert bool(after[LEARNER][0, b]) == bool(open_rows)
            if open_rows:
                t = open_rows[0]
                assert torch.equal(after[keys.OBS][0, b], before[keys.OBS][t, b])
                assert int(after[keys.ACTION][0, b]) == int(before[keys.ACTION][t, b])
                assert float(after[keys.REWARD][0, b, 0]) == pytest.approx(float(credit.reward[t, b]))
        assert torch.equal(after["train"], after[LEARNER] & ~seat_credit(
            after[keys.SEAT], after[keys.REWARD], after[keys.TERMINATED], after[keys.TRUNCATED], after[keys.VALUE]
        ).open)  # fmt: skip


class _Corrupt(OnPolicyDataModule):
    """Overwrites every row that must not train (opponents, open decisions) with garbage after its targets."""

    def collect(self):
        rollout = super().collect()
        batch, skip = rollout.batch, ~rollout.batch["train"]
        batch[keys.OBS][skip] = float("nan")
        batch[keys.ADVANTAGE][skip] = 1e6
        batch[keys.RETURN][skip] = float("nan")
        batch[keys.LOGPROB][skip] = -50.0
        batch[keys.ACTION][skip] = 0
        return rollout


def _weights_after(tmp_path, corrupt):
    pl.seed_everything(3)
    dm_class = _Corrupt if corrupt else OnPolicyDataModule
    dm = dm_class(TurnToy(3, max_episode_steps=9), num_envs=4, num_steps=10, total_env_steps=120,
                  seats={2: "random"}, league={"size": 2, "snapshot_every_n_updates": 1, "share": 0.5})  # fmt: skip
    module = PPO(env_spec=dm.env_spec, hidden_sizes=(16,), update_epochs=2, num_minibatches=2)
    _fit(tmp_path, module, dm)
    return [p.detach().clone() for p in module.parameters()], module


def test_opponents_and_open_decisions_never_contribute_a_gradient(tmp_path):
    clean, _ = _weights_after(tmp_path / "a", corrupt=False)
    dirty, module = _weights_after(tmp_path / "b", corrupt=True)
    assert module.updates == 3
    for a, b in zip(clean, dirty):
        assert torch.isfinite(b).all()
        assert torch.equal(a, b)


def test_bad_seat_maps_fail_with_one_line_before_any_work():
    env = TurnToy(3)
    cases = [
        ({5: "self"}, "data.seats names seat 5, but 'TurnToy' has seats 0..2"),
        ({1: "teammate"}, "data.seats[1]='teammate' is not a seat kind"),
        ({1: "no_such_pkg.bots:Bot"}, "data.seats[1]='no_such_pkg.bots:Bot': cannot import the bot"),
        ({1: "missing.ckpt"}, "data.seats[1]='missing.ckpt': no such checkpoint file"),
        ({0: "random", 1: "random", 2: "random"}, "maps no seat to 'self'"),
    ]
    for seats, message in cases:
        with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")) as error:
            OnPolicyDataModule(env, seats=seats)
        assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="applies to multi-seat games"):
        OnPolicyDataModule(CartPole(), seats={0: "self"})
    with pytest.raises(ConfigError, match="normalize_reward"):
        PPO(env_spec=env.spec, normalize_reward=True)


def test_nan_observation_or_reward_is_caught_by_the_finite_watch(tmp_path):
    from rl_lightning.data.selfplay import _finite_view
    from rl_lightning.envs.base import BatchedEnv
    from rl_lightning.errors import EnvError

    env = BatchedEnv(TurnToy(3, max_episode_steps=9), 4)
    for key, index in ((keys.OBS, (1, 2, 5)), (keys.REWARD, (0, 3, 1)), (keys.FINAL_OBS, (2, 1, 0, 4))):
        out = env.reset()
        ticks = torch.stack([env.step(torch.zeros(4, dtype=torch.int64)).update(out.exclude(keys.IS_FIRST))
                             for _ in range(3)])  # fmt: skip
        ticks[key][index] = float("nan")
        env.watch(_finite_view(ticks))
        with pytest.raises(EnvError, match=f"index {index[1]} of 4.*non-finite '{key}'"):
            env.check_outputs()


def test_update_shuffles_every_learning_row_when_they_do_not_split_evenly():
    from tensordict import TensorDict

    module = PPO(env_spec=TurnToy(3).spec, hidden_sizes=(8,), update_epochs=12, num_minibatches=2)
    rows = 7  # self-play keeps a varying number of learning rows; 1 sits out each epoch, a different one each time
    batch = TensorDict({
        keys.OBS: torch.arange(rows, dtype=torch.float32).unsqueeze(-1).expand(rows, 7).clone(),
        keys.ACTION: torch.zeros(rows, dtype=torch.int64), keys.LOGPROB: torch.zeros(rows),
        keys.VALUE: torch.zeros(rows), keys.ADVANTAGE: torch.randn(rows), keys.RETURN: torch.zeros(rows),
        keys.ACTION_MASK: torch.ones(rows, 3, dtype=torch.bool),
    }, batch_size=[rows])  # fmt: skip
    seen, step = [], module._minibatch_step

    def record(mb, *args):
        assert mb[keys.OBS].shape[0] == rows // 2
        seen.extend(mb[keys.OBS][:, 0].long().tolist())
        return step(mb, *args)

    module._minibatch_step = record
    module.update(batch, torch.optim.Adam(module.parameters()))
    assert len(seen) == 12 * 2 * (rows // 2)
    assert set(seen) == set(range(rows))


def test_a_carried_decision_gets_the_credit_it_would_have_in_one_long_rollout():
    """Two rollouts of 7 ticks, carried rows included, credit each open decision exactly as one 14-tick rollout."""
    from tensordict import TensorDict

    from rl_lightning.data.league import SeatPlayers, random_actor
    from rl_lightning.data.selfplay import SelfPlayCollector
    from rl_lightning.envs.base import BatchedEnv

    seats, steps = 3, 7
    env = BatchedEnv(TurnToy(seats, p_end=0.1, max_episode_steps=9), 6, seed=4)
    collector = SelfPlayCollector(env, SeatPlayers(["self"] * seats, None, env.device), seed=5)

    def policy(obs, generator):
        return TensorDict({keys.ACTION: random_actor(obs, generator)}, batch_size=obs.batch_size)

    def credit_of(batch):
        value = batch[keys.OBS].sum(-1).double()  # any fixed function of the seat's view
        final_value = batch[keys.FINAL_OBS].sum(-1).double()
        return seat_credit(batch[keys.SEAT], batch[keys.REWARD].double(), batch[keys.TERMINATED],
                           batch[keys.TRUNCATED], value, final_value)  # fmt: skip

    first, second = collector.rollout(policy, steps, 0), collector.rollout(policy, steps, 0)
    long = torch.cat([first[seats:], second[seats:]])
    whole, split = credit_of(long), credit_of(second)
    carried = 0
    for b in range(6):
        for j in range(seats):
            if not second[LEARNER][j, b]:
                continue
            carried += 1
            # The carried row of seat j is seat j's last decision in the first rollout's ticks.
            ticks = (first[keys.SEAT][seats:, b] == j).nonzero().flatten()
            t = int(ticks[-1])
            assert torch.equal(second[keys.OBS][j, b], first[keys.OBS][seats + t, b])
            assert float(split.reward[j, b]) == pytest.approx(float(whole.reward[t, b]))
            assert float(split.next_value[j, b]) == pytest.approx(float(whole.next_value[t, b]))
            assert bool(split.terminated[j, b]) == bool(whole.terminated[t, b])
            assert bool(split.open[j, b]) == bool(whole.open[t, b])
    assert carried >= 6


def test_a_bundled_heuristic_bot_seat_plays_from_the_observation(tmp_path):
    """A bot seat gets the acting seat's observation tensor (the bot protocol), not the collector's TensorDict:
    the Hearts heuristic in seat 1 of a self-play fit acts exactly as the bot does on the recorded rows."""
    pytest.importorskip("pyspiel")
    from rl_lightning.envs.games import OpenSpielEnv
    from rl_lightning.envs.games.bots import HeartsHeuristic

    env = OpenSpielEnv("open_spiel:hearts")
    seats = {1: "rl_lightning.envs.games.bots.HeartsHeuristic"}
    module, dm = tiny_selfplay(num_steps=16, total_env_steps=4 * 16, seats=seats, env=env)
    rollouts = Rollouts()
    _fit(tmp_path, module, dm, callbacks=[rollouts])
    batch = rollouts.batches[-1]
    bot_rows = (batch[keys.SEAT] == 1) & ~batch[CARRIED]
    assert bool(bot_rows.any())
    rows = batch[bot_rows]
    expected = HeartsHeuristic()(rows[keys.OBS], rows[keys.ACTION_MASK], rows[keys.SEAT], torch.Generator())
    assert torch.equal(rows[keys.ACTION], expected)


def test_final_seat_values_keep_each_truncated_games_seats_in_order():
    """Three games truncated in one rollout: each seat's final value is the critic's on that game's view of that
    seat (a seat-major read of the critic's outputs mixes games up as soon as two are truncated)."""
    from rl_lightning.algos.selfplay_targets import final_seat_values

    module, _ = tiny_selfplay()
    steps, games, seats = 4, 3, 3
    truncated = torch.zeros(steps, games, dtype=torch.bool)
    truncated[1, 0] = truncated[3, 1] = truncated[3, 2] = True
    final_obs = torch.randn(steps, games, seats, 7, generator=torch.Generator().manual_seed(0))
    batch = TensorDict({keys.TRUNCATED: truncated, keys.FINAL_OBS: final_obs, keys.VALUE: torch.zeros(steps, games)},
                       [steps, games])  # fmt: skip
    values = final_seat_values(module, batch)
    with torch.no_grad():
        expected = module.critic(module._critic_features(TensorDict({keys.OBS: final_obs}, [steps, games, seats])))
    expected = expected.squeeze(-1) * truncated.unsqueeze(-1)
    assert torch.allclose(values, expected, atol=1e-6)
    assert values[truncated].std(0).min() > 0  # the seats' values differ, so an order mix-up would show
