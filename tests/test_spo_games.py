"""SPO in games (DESIGN.md §10, ``algos/spo/seats.py``): refusals, search scored from the searching seat's side,
per-seat critic targets, self-play rollouts in replay."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos.spo import SPO
from rl_lightning.algos.spo.prior import ActorCriticPrior
from rl_lightning.algos.spo.search import SearchConfig, smc_search
from rl_lightning.algos.spo.seats import check_search_game, seat_value_targets, strip_carried
from rl_lightning.envs.base import EnvSpec, TorchEnv
from rl_lightning.errors import ConfigError
from tests.selfplay_toys import TurnToy


class Nim(TorchEnv):
    """Two seats take 1 or 2 stones in turn from ``stones``; taking the last one wins (+1, the other -1).

    Every move also pays the mover ``bonus[c, a]`` and the other seat its negation (zero-sum shaping, so rewards
    arrive on both seats' turns). Observation of a seat: one-hot of ``(stones left, that seat)``. Seat 0 starts;
    with ``max_steps`` a game is truncated after that many moves and steps carry ``final_obs`` ``[B, 2, obs]``.
    Every step is recorded in ``history`` as (stones, seat, moves so far, action).
    """

    zero_sum = True

    def __init__(self, stones: int = 6, bonus: torch.Tensor | None = None, max_steps: int = 0) -> None:
        self.stones, self.max_steps = stones, max_steps
        self.bonus = torch.zeros(stones + 1, 2) if bonus is None else bonus
        self.spec = EnvSpec(
            name="Nim", obs_shape=(2 * (stones + 1),), discrete=True, num_actions=2, has_action_mask=True,
            max_episode_steps=max_steps, num_seats=2, perfect_information=True,
        )  # fmt: skip
        self.history: list[tuple[torch.Tensor, ...]] = []

    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        zeros = torch.zeros(num, dtype=torch.int64)
        return TensorDict({"c": zeros + self.stones, "seat": zeros, "t": zeros.clone()}, batch_size=[num])

    def view(self, c: torch.Tensor, seat: torch.Tensor) -> torch.Tensor:
        return F.one_hot(c * 2 + seat, self.spec.obs_shape[0]).float()

    def observe(self, state: TensorDict) -> TensorDict:
        c, seat = state["c"], state["seat"]
        mask = torch.stack([c >= 1, c >= 2], -1)
        out = {keys.OBS: self.view(c, seat), keys.ACTION_MASK: mask, keys.SEAT: seat, keys.IS_FIRST: state["t"] == 0}
        return TensorDict(out, batch_size=state.batch_size)

    def step_state(self, state, action, generator, inplace=False):
        c, seat, t = state["c"], state["seat"], state["t"]
        self.history.append((c.clone(), seat.clone(), t.clone(), action.clone()))
        left = c - action - 1
        terminated = left == 0
        paid = self.bonus[c, action] + terminated.float()  # the mover's gain; the other seat loses as much
        reward = torch.stack([paid, -paid], -1) * torch.where(seat == 0, 1.0, -1.0).unsqueeze(-1)
        truncated = (t + 1 >= self.max_steps) & ~terminated if self.max_steps else torch.zeros_like(terminated)
        done = terminated | truncated
        nxt = TensorDict({"c": torch.where(done, self.stones, left), "seat": torch.where(done, 0, 1 - seat),
                          "t": torch.where(done, 0, t + 1)}, batch_size=state.batch_size)  # fmt: skip
        out = self.observe(nxt)
        out.update({keys.REWARD: reward, keys.TERMINATED: terminated, keys.TRUNCATED: truncated})
        if self.max_steps:
            views = [self.view(left.clamp_min(0), torch.full_like(seat, s)) for s in (0, 1)]
            out[keys.FINAL_OBS] = torch.stack(views, 1)
        return nxt, out


def table_prior(env: Nim, logits: torch.Tensor, values: torch.Tensor) -> ActorCriticPrior:
    """π(·|obs) = softmax(logits[obs]) and V(obs) = values[obs] (one-hot features select rows)."""
    return ActorCriticPrior(lambda x: x @ logits.float(), lambda x: x @ values.float(), env.spec)


def nim_root(env: Nim, num: int, stones: int, seat: int) -> tuple[TensorDict, TensorDict]:
    state = env.reset_state(num, torch.Generator())
    state["c"].fill_(stones)
    state["seat"].fill_(seat)
    return state, env.observe(state)


def naive_log_weight(env: Nim, values: torch.Tensor, row: int, searcher: int, depth: int) -> float:
    """The searching seat's log-weight of particle ``row`` replayed from ``history`` in plain Python (no resample):
    its reward on every move, its own value where it acts next, the negated value where the opponent does, its
    own final view on truncation, nothing after the game ends."""
    value = lambda c, s: float(values[c * 2 + s])  # noqa: E731 - the value for seat s acting at c stones
    c0, s0 = int(env.history[0][0][row]), int(env.history[0][1][row])
    previous, weight, alive = value(c0, s0), 0.0, True
    for step in range(depth):
        c, seat, t, a = (int(x[row]) for x in env.history[step])
        left = c - a - 1
        gain = float(env.bonus[c, a]) + (1.0 if left == 0 else 0.0)
        reward = gain if seat == searcher else -gain
        truncated = left > 0 and env.max_steps > 0 and t + 1 >= env.max_steps
        if left == 0:
            boot = 0.0
        elif truncated:
            boot = value(left, searcher)
        else:
            boot = value(left, 1 - seat) * (1.0 if 1 - seat == searcher else -1.0)
        if alive:
            weight += reward + boot - previous
        alive = alive and left > 0 and not truncated
        previous = boot
    return weight


@pytest.mark.parametrize(("seat", "max_steps", "stones"), [(0, 0, 7), (1, 0, 7), (1, 3, 4)])
def test_particle_weights_match_a_naive_loop_from_the_searching_seat(seat, max_steps, stones):
    gen = torch.Generator().manual_seed(3)
    env = Nim(stones=7, bonus=torch.randn(8, 2, generator=gen) * 0.3, max_steps=max_steps)
    values = torch.randn(env.spec.obs_shape[0], generator=gen)
    prior = table_prior(env, torch.zeros(env.spec.obs_shape[0], 2), values)
    depth = 5
    config = SearchConfig(num_particles=32, depth=depth, resample_period=depth + 1)  # no resample: raw weights
    state, obs = nim_root(env, 2, stones=stones, seat=seat)
    result = smc_search(env, state, obs, prior, config, torch.tensor(1.0), gen)
    expected = [naive_log_weight(env, values, row, seat, depth) for row in range(2 * 32)]
    torch.testing.assert_close(result.log_weights.flatten(), torch.tensor(expected), atol=1e-5, rtol=0)
    ended = torch.stack([h[0] for h in env.history]) - torch.stack([h[3] for h in env.history]) - 1 == 0
    assert bool(ended.any())
    assert bool((~ended).any())
    if max_steps:
        assert bool((torch.stack([h[2] for h in env.history]) + 1 == max_steps)[~ended].any())  # and truncated ones


def test_nim_search_takes_the_last_stones_from_either_seat():
    """Two stones left: taking both wins at once; taking one lets the opponent (the same prior) take the last."""
    env = Nim(stones=6)
    prior = table_prior(env, torch.zeros(14, 2), torch.zeros(14))
    config = SearchConfig(num_particles=64, depth=2, resample_period=2)
    for seat in (0, 1):
        state, obs = nim_root(env, 1, stones=2, seat=seat)
        result = smc_search(env, state, obs, prior, config, torch.tensor(0.2), torch.Generator().manual_seed(seat))
        target = torch.zeros(2).scatter_add_(0, result.sampled_actions[0], result.weights[0])
        assert target[1] > 0.95, (seat, target)


# ----- Connect Four (OpenSpiel) ---------------------------------------------------------------------------------
#: x (seat 0) to move with three in column 0: playing 0 wins at once (o also threatens column 6).
WIN_IN_ONE = [0, 6, 0, 6, 0, 6]
#: o (seat 1) to move; x threatens column 0: o must block there, and x is free to pick any reply.
THREAT = [0, 6, 0, 6, 0]
#: 40 moves, x to move with columns 2 and 6 open: playing 6 leaves o its only move, 2, which wins; blocking at 2
#: leaves o only 6, a draw (found by random play; checked below with the engine).
FORCED = [6, 5, 5, 0, 6, 1, 3, 5, 5, 5, 4, 3, 1, 4, 4, 0, 5, 1, 2, 4, 1, 2, 0, 4, 2, 6, 6, 2, 3, 1, 0, 1, 6, 3, 2, 4,
          3, 0, 0, 3]  # fmt: skip


def _connect_four():
    pytest.importorskip("pyspiel", reason='needs pip install -e ".[games]"')
    from rl_lightning.envs.games import OpenSpielEnv

    return OpenSpielEnv("open_spiel:connect_four")


def _c4_root(env, moves: list[int], num: int = 1):
    gen = torch.Generator().manual_seed(0)
    state = env.reset_state(num, gen)
    for move in moves:
        state, _ = env.step_state(state, torch.full((num,), move), gen, inplace=True)
    return state, env.observe(state)


def _untrained_spo(env) -> SPO:
    torch.manual_seed(0)
    return SPO(env_spec=env.spec, hidden_sizes=(64, 64))


def _target(result, num_actions: int) -> torch.Tensor:
    """The aggregated search target q̂(a) of each root ``[E, A]``."""
    target = torch.zeros(result.weights.shape[0], num_actions)
    return target.scatter_add_(1, result.sampled_actions, result.weights)


@pytest.mark.parametrize(("moves", "best", "seat"), [(WIN_IN_ONE, 0, 0), (FORCED, 2, 0)], ids=["win", "forced-block"])
def test_connect_four_search_finds_the_right_move_with_an_untrained_prior(moves, best, seat):
    env = _connect_four()
    module = _untrained_spo(env)
    state, obs = _c4_root(env, moves, num=4)
    try:
        assert obs[keys.SEAT].tolist() == [seat] * 4
        config = SearchConfig(num_particles=64, depth=2, resample_period=2)
        result = smc_search(env, state, obs, module.prior, config, torch.tensor(0.2), torch.Generator().manual_seed(1))
        target = _target(result, env.spec.num_actions)
        assert (target[:, best] > 0.9).all(), target
        prior = module.prior.params(obs)[0].softmax(-1)[:, best]
        assert (prior < 0.6).all()  # the prior alone does not know it (uniform-ish over the legal moves)
    finally:
        env.release(state)
    assert env.live_count == 0


def test_forced_block_position_is_what_the_test_says():
    env = _connect_four()
    state, _ = _c4_root(env, FORCED)
    game = env.engine_state(state, 0)
    assert game.legal_actions() == [2, 6]
    assert game.current_player() == 0
    for move, reply, outcome in ((6, 2, -1.0), (2, 6, 0.0)):
        clone = game.clone()
        clone.apply_action(move)
        assert clone.legal_actions() == [reply]
        clone.apply_action(reply)
        assert clone.is_terminal()
        assert clone.returns()[0] == outcome
    env.release(state)


def test_connect_four_search_sees_the_free_opponents_win():
    """o must block column 0, and x (the same untrained prior) may reply anywhere. With the critic zeroed only the
    game's result scores a particle (from o's side): blocking particles weigh exactly 0, the others -1 where x's
    reply won and 0 elsewhere. SMC's target is an expectation over x's replies: the block gets more than its share
    of the root samples."""
    env = _connect_four()
    module = _untrained_spo(env)
    torch.nn.init.zeros_(module.critic[-1].weight)
    torch.nn.init.zeros_(module.critic[-1].bias)
    state, obs = _c4_root(env, THREAT, num=8)
    try:
        assert obs[keys.SEAT].tolist() == [1] * 8
        config = SearchConfig(num_particles=256, depth=2, resample_period=3)  # no resample: the raw log-weights
        result = smc_search(env, state, obs, module.prior, config, torch.tensor(0.2), torch.Generator().manual_seed(2))
        blocks = result.sampled_actions == 0
        log_w = result.log_weights
        assert (log_w[blocks] == 0).all()
        lost = log_w[~blocks] == -1
        assert ((log_w[~blocks] == 0) | lost).all()
        assert 0.05 < lost.float().mean() < 0.3  # x found its win in about one reply in seven
        target = _target(result, env.spec.num_actions)
        share = blocks.float().mean(-1)
        assert (target[:, 0] > share).all(), (target[:, 0], share)
    finally:
        env.release(state)


# ----- refusals ---------------------------------------------------------------------------------------------------
def test_spo_refuses_an_imperfect_information_game_in_one_line():
    pytest.importorskip("pyspiel", reason='needs pip install -e ".[games]"')
    from rl_lightning.envs.games import OpenSpielEnv

    spec = OpenSpielEnv("open_spiel:hearts").spec
    with pytest.raises(ConfigError) as err:
        SPO(env_spec=spec)
    message = str(err.value)
    assert "\n" not in message
    assert "'open_spiel:hearts' is an imperfect-information game" in message
    assert "hidden cards" in message
    assert "PPO self-play" in message


def test_spo_refuses_a_game_env_that_cannot_snapshot_in_one_line():
    pytest.importorskip("pettingzoo")
    from rl_lightning.data import ReplayDataModule
    from rl_lightning.envs.games import PettingZooEnv

    env = PettingZooEnv("classic/connect_four-v3", perfect_information=True)  # declared: then snapshots decide
    module = SPO(env_spec=env.spec, hidden_sizes=(16,))
    with pytest.raises(ConfigError) as err:
        module.check_config(ReplayDataModule(env, num_envs=2))
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("data.env: SPO searches on env snapshots, and PettingZooEnv cannot snapshot")


def test_spo_refuses_a_game_it_cannot_score_from_one_seat():
    with pytest.raises(ConfigError, match="needs a two-seat zero-sum game .* this one has 3 seats and is not zero-sum"):
        check_search_game(TurnToy(seats=3))
    check_search_game(Nim())  # two seats, zero-sum: accepted


# ----- the learning side ------------------------------------------------------------------------------------------
def test_critic_targets_follow_each_seat_and_leave_open_decisions_out():
    """Seat 0 acts, seat 1 wins on its move (seat 0's -1 arrives on seat 1's turn); then a new game: seat 0 acts,
    seat 1 acts, seat 0 acts (both still open at the sequence end, except the first)."""
    seat = torch.tensor([0, 1, 0, 1, 0]).unsqueeze(1)
    reward = torch.zeros(5, 1, 2)
    reward[1, 0] = torch.tensor([-1.0, 1.0])
    reward[2, 0] = torch.tensor([0.25, -0.25])  # shaping paid on seat 0's move
    terminated = torch.tensor([False, True, False, False, False]).unsqueeze(1)
    seq = TensorDict({keys.SEAT: seat, keys.REWARD: reward, keys.TERMINATED: terminated,
                      keys.TRUNCATED: torch.zeros_like(terminated)}, batch_size=[5, 1])  # fmt: skip
    value = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5]).unsqueeze(1)
    targets, weight = seat_value_targets(value, None, seq, gamma=0.9, lam=1.0)
    assert weight.squeeze(1).tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    torch.testing.assert_close(targets[:3, 0], torch.tensor([-1.0, 1.0, 0.25 + 0.9 * 0.5]))


def test_process_rollout_keeps_the_ticks_of_a_self_play_rollout():
    seats, ticks, games = 2, 3, 4
    batch = TensorDict({keys.OBS: torch.arange(seats + ticks).float().view(-1, 1, 1).expand(-1, games, 1),
                        "learner": torch.ones(seats + ticks, games, dtype=torch.bool),
                        "carried": torch.zeros(seats + ticks, games, dtype=torch.bool),
                        "player": torch.zeros(seats + ticks, games, dtype=torch.int64)},
                       batch_size=[seats + ticks, games])  # fmt: skip
    out = strip_carried(batch, seats)
    assert out.batch_size == torch.Size([ticks, games])
    assert set(out.keys()) == {keys.OBS}
    assert out[keys.OBS][:, 0, 0].tolist() == [2.0, 3.0, 4.0]


def test_module_critic_loss_uses_the_per_seat_targets():
    """Through ``SPO.losses``' critic term: with both critics zeroed the loss is ½·mean y² over the complete rows,
    y the credited rewards of the sequence above (-1 for the loser's move, +1 for the winner's, 0.25)."""
    env = Nim(stones=3)
    module = SPO(env_spec=env.spec, hidden_sizes=(8,), gamma=0.9, gae_lambda=1.0)
    for critic in (module.critic, module.target_critic):
        torch.nn.init.zeros_(critic[-1].weight)
        torch.nn.init.zeros_(critic[-1].bias)
    seat = torch.tensor([0, 1, 0, 1, 0]).unsqueeze(1)
    reward = torch.zeros(5, 1, 2)
    reward[1, 0] = torch.tensor([-1.0, 1.0])
    reward[2, 0] = torch.tensor([0.25, -0.25])
    terminated = torch.tensor([False, True, False, False, False]).unsqueeze(1)
    seq = TensorDict({keys.OBS: env.view(torch.tensor([3, 2, 3, 2, 1]), seat.squeeze(1)).unsqueeze(1),
                      keys.SEAT: seat, keys.REWARD: reward, keys.TERMINATED: terminated,
                      keys.TRUNCATED: torch.zeros_like(terminated)}, batch_size=[5, 1])  # fmt: skip
    loss, _ = module._critic_terms(seq)
    torch.testing.assert_close(loss, torch.tensor(0.5 * (1.0 + 1.0 + 0.0625) / 3))


def test_module_critic_bootstraps_a_truncated_game_from_each_seats_final_view():
    """Both seats' last decisions before a truncation bootstrap from their own final view: V' = 0.5 everywhere
    (target critic), so each target is γ·0.5 and the loss ½·(0.45)² (online critic zero)."""
    env = Nim(stones=5, max_steps=2)
    module = SPO(env_spec=env.spec, hidden_sizes=(8,), gamma=0.9, gae_lambda=1.0)
    for critic, bias in ((module.critic, 0.0), (module.target_critic, 0.5)):
        torch.nn.init.zeros_(critic[-1].weight)
        torch.nn.init.constant_(critic[-1].bias, bias)
    seat = torch.tensor([0, 1]).unsqueeze(1)
    truncated = torch.tensor([False, True]).unsqueeze(1)
    final = torch.zeros(2, 1, 2, 12)  # every seat's view of the last state, on the truncated row only
    final[1, 0] = torch.stack([env.view(torch.tensor(3), torch.tensor(s)) for s in (0, 1)])
    seq = TensorDict({keys.OBS: env.view(torch.tensor([5, 4]), seat.squeeze(1)).unsqueeze(1), keys.SEAT: seat,
                      keys.REWARD: torch.zeros(2, 1, 2), keys.TERMINATED: torch.zeros_like(truncated),
                      keys.TRUNCATED: truncated, keys.FINAL_OBS: final}, batch_size=[2, 1])  # fmt: skip
    loss, _ = module._critic_terms(seq)
    torch.testing.assert_close(loss, torch.tensor(0.5 * 0.45**2))
