"""PettingZooEnv: the multi-seat contract on PettingZoo's classic games and on tiny envs of our own (games_envs)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("pettingzoo")

from rl_lightning import keys  # noqa: E402
from rl_lightning.envs.base import BatchedEnv  # noqa: E402
from rl_lightning.envs.games import GAME_SCORE, PettingZooEnv  # noqa: E402
from rl_lightning.errors import ConfigError  # noqa: E402


def random_actions(out: dict, generator: torch.Generator) -> torch.Tensor:
    mask = out[keys.ACTION_MASK]
    return torch.where(mask, torch.rand(mask.shape, generator=generator), -1.0).argmax(-1)


def test_connect_four_masks_seats_and_rewards_match_the_env() -> None:
    env = BatchedEnv(PettingZooEnv("classic/connect_four-v3"), 3, seed=0)
    spec = env.spec
    assert (spec.obs_shape, spec.obs_dtype, spec.num_actions, spec.num_seats) == ((6, 7, 2), torch.int8, 7, 2)
    out, generator = env.reset(), torch.Generator().manual_seed(0)
    games = 0
    for _ in range(150):
        for index in range(3):
            aec = env.env._row(env.state["snapshot"][index].item()).env
            view = aec.observe(aec.agent_selection)
            assert int(out[keys.SEAT][index]) == aec.possible_agents.index(aec.agent_selection)
            assert out[keys.ACTION_MASK][index].tolist() == [bool(v) for v in view["action_mask"]]
            assert torch.equal(out[keys.OBS][index], torch.from_numpy(view["observation"]))
        seat = out[keys.SEAT].clone()
        out = env.step(random_actions(out, generator))
        assert out[keys.REWARD].shape == (3, 2)
        done = out[keys.TERMINATED]
        assert torch.equal(out[keys.SEAT][~done], 1 - seat[~done])
        for index in done.nonzero().flatten().tolist():
            reward = out[keys.REWARD][index]
            assert float(reward.sum()) == 0.0
            if reward.abs().sum():  # a win: the mover is paid +1, the other seat -1 on the same tick
                assert float(reward[seat[index]]) == 1.0
            assert torch.equal(out[GAME_SCORE][index], reward)
            assert int(out[keys.OBS][index].sum()) == 0  # same-step reset: an empty board
            assert bool(out[keys.IS_FIRST][index])
            games += 1
    assert games >= 3


def test_a_seat_is_paid_while_another_acts_and_the_game_ends_on_another_seats_move() -> None:
    env = BatchedEnv(PettingZooEnv("tests.games_envs:PassTheParcel"), 4, seed=1)
    out, generator = env.reset(), torch.Generator().manual_seed(1)
    starts = set(out[keys.SEAT].tolist())
    totals = torch.zeros(4, 3)
    for tick in range(20):
        seat = out[keys.SEAT].clone()
        turn = out[keys.OBS][:, 0]
        assert torch.equal(out[keys.ACTION_MASK][:, 2], turn % 2 == 0)  # the env's own mask
        action = random_actions(out, generator)
        out = env.step(action)
        expected = torch.zeros(4, 3)
        expected[torch.arange(4), (seat + 1) % 3] = action.float() + 1  # the next seat is paid, not the mover
        assert torch.equal(out[keys.REWARD], expected)
        totals += expected
        ends = tick % 5 == 4
        assert bool(out[keys.TERMINATED].all()) == ends
        assert not bool(out[keys.TERMINATED].any()) or ends
        if ends:
            assert torch.equal(out[GAME_SCORE], totals)
            assert torch.equal(out[keys.FINAL_OBS][:, :, 0], torch.full((4, 3), 5.0))  # every seat's view at turn 5
            assert torch.equal(out[keys.FINAL_OBS][:, :, 1], torch.arange(3.0).expand(4, 3))
            assert bool(out[keys.IS_FIRST].all())
            assert torch.equal(out[keys.OBS][:, 0], torch.zeros(4))
            starts |= set(out[keys.SEAT].tolist())
            totals.zero_()
        else:
            assert torch.equal(out[keys.SEAT], (seat + 1) % 3)
    assert len(starts) > 1  # the reset seed decides who starts


def test_same_seed_same_games() -> None:
    def seats(seed: int) -> list[list[int]]:
        env = BatchedEnv(PettingZooEnv("tests.games_envs:PassTheParcel"), 6, seed=seed)
        out, generator, rows = env.reset(), torch.Generator().manual_seed(0), []
        for _ in range(25):
            rows.append(out[keys.SEAT].tolist())
            out = env.step(random_actions(out, generator))
        return rows

    assert seats(3) == seats(3)
    assert seats(3) != seats(4)


def test_parallel_env_steps_jointly_after_every_seat_chose() -> None:
    env = BatchedEnv(PettingZooEnv("tests.games_envs:SimultaneousSum", all_actions_legal=True), 1, seed=0)
    out = env.reset()
    assert out[keys.ACTION_MASK].all()  # no mask, declared all legal: every action legal
    previous = 0
    for round_, left in enumerate([1, 0, 1]):
        assert int(out[keys.SEAT]) == 0
        out = env.step(torch.tensor([left]))
        assert int(out[keys.SEAT]) == 1
        assert out[keys.OBS][0].tolist() == [float(round_), float(previous)]  # right sees last round's, not this one
        assert not out[keys.REWARD].any()
        out = env.step(torch.tensor([0]))  # right chooses 0: the env steps now
        assert out[keys.REWARD][0].tolist() == [0.0, float(left)]  # left is paid right's 0, right left's choice
        assert bool(out[keys.TERMINATED]) == (round_ == 2)
        previous = left


def test_step_limit_truncates_with_every_seats_view() -> None:
    env = BatchedEnv(PettingZooEnv("tests.games_envs:PassTheParcel", {"length": 50}, max_episode_steps=4), 2, seed=0)
    out = env.reset()
    for _ in range(4):
        out = env.step(torch.zeros(2, dtype=torch.int64))
    assert out[keys.TRUNCATED].all()
    assert not out[keys.TERMINATED].any()
    assert torch.equal(out[keys.FINAL_OBS][:, :, 0], torch.full((2, 3), 4.0))
    assert bool(out[keys.IS_FIRST].all())


def test_users_module_path_and_registry_module_load() -> None:
    env = PettingZooEnv("tests.games_envs", {"length": 3})  # a module with env()
    assert (env.spec.num_seats, env.spec.obs_shape, env.spec.num_actions) == (3, (3,), 3)
    assert env.spec.perfect_information is False
    legacy = PettingZooEnv("pettingzoo.classic.tictactoe_v3")  # PettingZoo's module path, made from its registry
    assert legacy.spec.num_actions == 9


@pytest.mark.parametrize(("env_id", "message"), [
    ("tests.no_such_games_module", "module 'tests.no_such_games_module' does not import (ModuleNotFoundError"),
    ("tests.games_envs:MismatchedObs", "the agents' observations differ (a: (3,) float32, b: (4,) float32"),
    ("tests.games_envs:NoMask", "agent 'c' has no action mask (neither obs['action_mask'] nor "
                                "infos[agent]['action_mask']), so illegal moves cannot be masked; add one, or declare "
                                "that every action is always legal with all_actions_legal: true"),
    ("tests.games_envs:SimultaneousSum", "agent 'left' has no action mask"),
    ("tests.games_envs:BoxActions", "acts in Box(2,); PettingZooEnv needs Discrete(n) actions"),
    ("tests.games_envs:Nothing", "has no class or function 'Nothing'"),
    ("classic/connect_fuor-v3", "is not a PettingZoo registry id (close: classic/connect_four-v3"),
    ("classic/rps-v2", "observes Discrete(); PettingZooEnv reads array observations"),
])  # fmt: skip
def test_bad_input_is_one_line(env_id: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        PettingZooEnv(env_id)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_parallel_envs_mask_in_infos_is_read() -> None:
    """``InfoMaskParallel`` puts its mask in ``infos`` (action 2 legal on even rounds only) and raises on an illegal
    action: random play by the mask never raises, and the mask follows the rounds."""
    env = BatchedEnv(PettingZooEnv("tests.games_envs:InfoMaskParallel"), 4, seed=0)
    out, generator = env.reset(), torch.Generator().manual_seed(0)
    rounds = torch.zeros(4)
    for _ in range(60):
        assert torch.equal(out[keys.ACTION_MASK][:, 2], rounds % 2 == 0)
        seat = out[keys.SEAT].clone()
        out = env.step(random_actions(out, generator))
        rounds = torch.where(seat == 1, rounds + 1, rounds)  # the env steps once the second seat chose
        rounds = torch.where(out[keys.TERMINATED], 0.0, rounds)


def test_all_actions_legal_is_needed_only_without_a_mask() -> None:
    assert PettingZooEnv("tests.games_envs:InfoMaskParallel").mask_source == "infos"
    assert PettingZooEnv("classic/tictactoe-v3", all_actions_legal=True).mask_source == "observation"
    assert PettingZooEnv("tests.games_envs:NoMask", all_actions_legal=True).mask_source == "none"


def eliminated_then_cut() -> tuple:
    """A ``LastOneStanding`` rollout whose seat 0 leaves on its first move, the others play on, cut at 4 moves."""
    from tensordict import TensorDict

    from rl_lightning.data.league import SeatPlayers
    from rl_lightning.data.selfplay import SelfPlayCollector

    env = BatchedEnv(PettingZooEnv("tests.games_envs:LastOneStanding", {"length": 50}, max_episode_steps=4), 2, seed=0)
    collector = SelfPlayCollector(env, SeatPlayers(["self"] * 3, None, env.device), seed=0)

    def policy(obs, generator):  # seat 0 leaves (action 2), every other seat plays 0
        action = torch.where(obs[keys.SEAT] == 0, 2, 0)
        value = torch.full(obs.batch_size, 0.5)
        return TensorDict({keys.ACTION: action, keys.VALUE: value, keys.LOGPROB: torch.zeros(obs.batch_size)},
                          batch_size=obs.batch_size)  # fmt: skip

    return env, collector.rollout(policy, 4, 0)


def test_a_seat_eliminated_before_the_game_is_cut_ends_terminated() -> None:
    env, batch = eliminated_then_cut()
    ticks = batch[3:]
    assert ticks[keys.SEAT][:, 0].tolist() == [0, 1, 2, 1]
    assert ticks[keys.TRUNCATED][3].all()
    assert ticks[keys.SEAT_TRUNCATED][3].tolist() == [[False, True, True]] * 2  # seat 0 had left: terminated


def test_an_eliminated_seat_bootstraps_from_zero_when_the_game_is_later_cut() -> None:
    """Bug: the game's ``truncated`` applied to every seat, so seat 0, out of the game since its first move, got
    ``truncated`` and the value of its final view; it was terminated (bootstrap 0). The seats still playing when
    the game was cut bootstrap from their own final views."""
    from rl_lightning.algos import PPO
    from rl_lightning.algos.selfplay_targets import selfplay_targets

    env, batch = eliminated_then_cut()
    module = PPO(env_spec=env.spec, hidden_sizes=(8,))
    with torch.no_grad():
        batch = selfplay_targets(module, batch)
        final = module.critic(module._critic_features(TensorDictOf(batch[keys.FINAL_OBS][3 + 3])))
    ticks = batch[3:]
    assert ticks[keys.NEXT_VALUE][0].tolist() == [0.0, 0.0]  # seat 0's only decision: terminated
    assert torch.allclose(ticks[keys.NEXT_VALUE][2], final[:, 2])  # seat 2's last decision: cut, V(its final view)
    assert torch.allclose(ticks[keys.NEXT_VALUE][3], final[:, 1])  # seat 1's last decision
    assert bool(final.abs().min() > 0)


def TensorDictOf(obs: torch.Tensor):  # noqa: N802 - reads like the constructor it wraps
    from tensordict import TensorDict

    return TensorDict({keys.OBS: obs.reshape(-1, *obs.shape[2:])}, [obs.shape[0] * obs.shape[1]]).reshape(obs.shape[:2])


def test_seat_credit_ends_each_seat_as_it_left_the_game() -> None:
    from rl_lightning.objectives.seat_credit import seat_credit

    _, batch = eliminated_then_cut()
    ticks = batch[3:]
    final_value = torch.full((4, 2, 3), 2.0)
    credit = seat_credit(ticks[keys.SEAT], ticks[keys.REWARD], ticks[keys.TERMINATED], ticks[keys.TRUNCATED],
                         ticks[keys.VALUE], final_value, ticks[keys.SEAT_TRUNCATED])  # fmt: skip
    assert credit.terminated[:, 0].tolist() == [True, False, False, False]  # seat 0 left the game
    assert credit.truncated[:, 0].tolist() == [False, False, True, True]  # seats 2 and 1 were cut while playing
    assert credit.next_value[:, 0].tolist() == [0.0, 0.5, 2.0, 2.0]  # seat 1's first decision: its next one's value
    assert credit.reward[:, 0].tolist() == [-1.0, 0.0, 0.0, 0.0]


def leaver_rollout(leave: str, length: int, steps: int, max_episode_steps: int = 0) -> tuple:
    """A ``LastOneStanding`` rollout of 3 games: seat 0 leaves on its first move (``leave``: terminated or truncated,
    its own ending), every other seat plays 0 until the game ends."""
    from tensordict import TensorDict

    from rl_lightning.data.league import SeatPlayers
    from rl_lightning.data.selfplay import SelfPlayCollector

    kwargs = {"length": length, "leave": leave}
    env = BatchedEnv(PettingZooEnv("tests.games_envs:LastOneStanding", kwargs, max_episode_steps), 3, seed=0)
    collector = SelfPlayCollector(env, SeatPlayers(["self"] * 3, None, env.device), seed=0)

    def policy(obs, generator):
        action = torch.where(obs[keys.SEAT] == 0, 2, 0)
        value = 0.25 + 0.25 * obs[keys.SEAT].float()
        return TensorDict({keys.ACTION: action, keys.VALUE: value, keys.LOGPROB: torch.zeros(obs.batch_size)},
                          batch_size=obs.batch_size)  # fmt: skip

    return env, collector.rollout(policy, steps, 0)


def naive_next_values(module, ticks) -> tuple[dict, int]:
    """Each closed decision's bootstrap, walked per (game, seat): the seat's value at its next decision in the game;
    at the game's end, V(the seat's own final view) if the seat was cut while in it (``seat_truncated``), else 0.
    Also counts the decisions of seats that left by truncation in a game that then terminated."""
    from tensordict import TensorDict

    steps, games = ticks.batch_size
    want, left_cut_then_terminated = {}, 0
    for game in range(games):
        for t in range(steps):
            seat = int(ticks[keys.SEAT][t, game])
            for u in range(t, steps):
                if u > t and int(ticks[keys.SEAT][u, game]) == seat:
                    want[t, game] = float(ticks[keys.VALUE][u, game])
                    break
                if ticks[keys.TERMINATED][u, game] or ticks[keys.TRUNCATED][u, game]:
                    if ticks[keys.SEAT_TRUNCATED][u, game, seat]:
                        view = TensorDict({keys.OBS: ticks[keys.FINAL_OBS][u, game, seat][None]}, [1])
                        want[t, game] = float(module.critic(module._critic_features(view)).reshape(()))
                        left_cut_then_terminated += bool(ticks[keys.TERMINATED][u, game])
                    else:
                        want[t, game] = 0.0
                    break
    return want, left_cut_then_terminated


@pytest.mark.parametrize(
    ("leave", "length", "max_episode_steps"),
    [("truncated", 4, 0), ("truncated", 50, 4), ("terminated", 50, 4), ("terminated", 4, 0)],
)
def test_each_seat_bootstraps_as_a_naive_loop_grouped_by_game_and_seat(leave, length, max_episode_steps) -> None:
    """Bug: a seat that left by its own truncation, in a game that then terminated, bootstrapped from 0: the values
    of the seats' final views were computed only for games the env truncated as a whole."""
    from rl_lightning.algos import PPO
    from rl_lightning.algos.selfplay_targets import selfplay_targets

    env, batch = leaver_rollout(leave, length, 12, max_episode_steps)
    torch.manual_seed(0)
    module = PPO(env_spec=env.spec, hidden_sizes=(8,))
    with torch.no_grad():
        got = selfplay_targets(module, batch.clone())[keys.NEXT_VALUE][3:]
        want, special = naive_next_values(module, batch[3:])
    assert len(want) >= 24  # most of the 36 decisions are closed
    for (t, game), value in want.items():
        assert got[t, game].item() == pytest.approx(value, abs=1e-6), (t, game)
    assert special == (3 * 3 if (leave, max_episode_steps) == ("truncated", 0) else 0)  # the case the bug hit
    final_views = [v for v in want.values() if abs(v) > 1e-3 and v not in (0.25, 0.5, 0.75)]  # not 0, not a value
    assert bool(final_views) == (leave == "truncated" or max_episode_steps > 0)


def test_seats_are_keyed_by_number_or_agent_name() -> None:
    from rl_lightning.data.selfplay import make_selfplay

    env = PettingZooEnv("classic/tictactoe-v3")  # agents player_1 (seat 0) and player_2 (seat 1)
    assert make_selfplay(env, {"player_2": "random"}, None).players.specs == ["self", "random"]
    assert make_selfplay(env, {"player_1": "random"}, None).players.specs == ["random", "self"]
    assert make_selfplay(env, {1: "random"}, None).players.specs == ["self", "random"]
    with pytest.raises(ConfigError, match="data.seats names seat 1 twice"):
        make_selfplay(env, {1: "random", "player_2": "random"}, None)
