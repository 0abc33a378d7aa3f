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
    env = BatchedEnv(PettingZooEnv("tests.games_envs:SimultaneousSum"), 1, seed=0)
    out = env.reset()
    assert out[keys.ACTION_MASK].all()  # no mask in the observation: every action legal
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
    ("tests.games_envs:NoMask", "observation dict has no 'action_mask', so illegal moves cannot be masked; add an "
                                "action_mask"),
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
