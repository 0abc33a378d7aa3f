"""OpenSpielEnv: the multi-seat contract (DESIGN.md §10) against pyspiel's own states, and its one-line refusals."""

from __future__ import annotations

import copy
import sys

import pytest
import torch

pytest.importorskip("pyspiel")

import pyspiel  # noqa: E402

from rl_lightning import keys  # noqa: E402
from rl_lightning.envs.base import BatchedEnv  # noqa: E402
from rl_lightning.envs.games import GAME_SCORE, OpenSpielEnv, PettingZooEnv  # noqa: E402
from rl_lightning.errors import ConfigError  # noqa: E402


def random_actions(out: dict, generator: torch.Generator) -> torch.Tensor:
    mask = out[keys.ACTION_MASK]
    return torch.where(mask, torch.rand(mask.shape, generator=generator), -1.0).argmax(-1)


def engine_view(env: BatchedEnv, index: int) -> tuple[int, list[float], list[int]]:
    """The acting seat, its engine tensor and its legal actions, read from pyspiel directly."""
    state = env.env.engine_state(env.state, index)
    seat = state.current_player()
    tensor = state.information_state_tensor(seat) if env.env.observation == "info_state" else \
        state.observation_tensor(seat)  # fmt: skip
    return seat, tensor, state.legal_actions()


@pytest.mark.parametrize(("env_id", "obs_shape", "seats", "perfect"), [
    ("open_spiel:hearts", (5088,), 4, False), ("connect_four", (3, 6, 7), 2, True)])  # fmt: skip
def test_outputs_match_the_engine(env_id: str, obs_shape: tuple, seats: int, perfect: bool) -> None:
    env = BatchedEnv(OpenSpielEnv(env_id), 3, seed=0)
    spec = env.spec
    assert (spec.obs_shape, spec.num_seats, spec.perfect_information) == (obs_shape, seats, perfect)
    assert spec.has_action_mask
    assert spec.discrete
    out = env.reset()
    generator = torch.Generator().manual_seed(0)
    for _ in range(70):
        assert out[keys.OBS].shape == (3, *obs_shape)
        assert out[keys.OBS].dtype == torch.float32
        assert out[keys.SEAT].dtype == torch.int64
        assert out[keys.ACTION_MASK].dtype == torch.bool
        for index in range(3):
            seat, tensor, legal = engine_view(env, index)
            assert int(out[keys.SEAT][index]) == seat
            assert torch.equal(out[keys.OBS][index].flatten(), torch.tensor(tensor))
            assert out[keys.ACTION_MASK][index].nonzero().flatten().tolist() == legal
        out = env.step(random_actions(out, generator))
        assert out[keys.REWARD].shape == (3, seats)
        assert out[keys.REWARD].dtype == torch.float32
        assert keys.FINAL_OBS not in out  # no step limit: the env cannot truncate


def test_hearts_pays_every_seat_when_the_hand_ends() -> None:
    """Hearts pays 26 - points to all four seats on the last card, three of them not acting; game_score = points."""
    env = BatchedEnv(OpenSpielEnv("open_spiel:hearts"), 4, seed=1)
    out, generator = env.reset(), torch.Generator().manual_seed(1)
    ended = 0
    while ended < 8:
        seat = out[keys.SEAT]
        out = env.step(random_actions(out, generator))
        done = out[keys.TERMINATED]
        reward = out[keys.REWARD]
        assert not bool(reward[~done].any())  # a terminal reward model: nothing before the end
        for index in done.nonzero().flatten().tolist():
            points = out[GAME_SCORE][index]
            assert float(points.sum()) in (26.0, 78.0)  # 78: someone shot the moon
            assert torch.equal(reward[index], 26.0 - points)
            others = [s for s in range(4) if s != int(seat[index])]
            assert bool((reward[index, others] != 0).any())  # seats that did not act were paid on this tick
            assert bool(out[keys.IS_FIRST][index])
            assert len(env.env.engine_state(env.state, index).history()) == 53  # same-step reset: a fresh deal
            ended += 1
        assert not bool(out[GAME_SCORE][~done].any())


def test_connect_four_seats_alternate_and_the_game_ends_on_the_winners_move() -> None:
    env = BatchedEnv(OpenSpielEnv("open_spiel:connect_four"), 2, seed=0)
    out, generator = env.reset(), torch.Generator().manual_seed(3)
    assert out[keys.SEAT].tolist() == [0, 0]
    assert bool(out[keys.IS_FIRST].all())
    for _ in range(200):
        seat = out[keys.SEAT].clone()
        out = env.step(random_actions(out, generator))
        done = out[keys.TERMINATED]
        assert torch.equal(out[keys.SEAT][~done], 1 - seat[~done])
        assert torch.equal(out[keys.SEAT][done], torch.zeros_like(seat[done]))
        for index in done.nonzero().flatten().tolist():
            reward = out[keys.REWARD][index]
            assert reward.sum() == 0  # zero-sum: the loser is paid -1 on the winner's move
            if reward.abs().sum() > 0:
                assert float(reward[seat[index]]) == 1.0


def test_same_seed_same_games() -> None:
    def record(seed: int) -> list[torch.Tensor]:
        env = BatchedEnv(OpenSpielEnv("open_spiel:hearts"), 2, seed=seed)
        out, generator = env.reset(), torch.Generator().manual_seed(7)
        rows = [out[keys.OBS].clone()]
        for _ in range(120):
            out = env.step(random_actions(out, generator))
            rows += [out[keys.OBS].clone(), out[keys.REWARD].clone()]
        return rows

    first, again, other = record(5), record(5), record(6)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], other[0])  # another seed deals other cards


def test_snapshot_continues_identically_through_a_new_deal() -> None:
    """A snapshot (state.clone() + the row's RNG) replays the same future, the next hand's deal included."""
    core = OpenSpielEnv("open_spiel:hearts")
    generator = torch.Generator().manual_seed(0)
    state = core.reset_state(2, generator)
    out = core.observe(state)
    for _ in range(40):
        state, out = core.step_state(state, random_actions(out, generator), generator, inplace=True)
    snap = core.snapshot(state)
    assert core.live_count == 4
    draws = torch.Generator().manual_seed(9)
    actions = []
    outs_a, outs_b = [], []
    for _ in range(40):  # beyond the end of the first hands (64 decisions each)
        action = random_actions(out, draws)
        actions.append(action)
        state, out = core.step_state(state, action, generator, inplace=True)
        outs_a.append(out)
    out_b = core.observe(snap)
    for action in actions:
        snap, out_b = core.step_state(snap, action, generator, inplace=True)
        outs_b.append(out_b)
    assert any(bool(o[keys.TERMINATED].any()) for o in outs_a)
    for a, b in zip(outs_a, outs_b, strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a.keys())  # noqa: SIM118 - iterating a TensorDict yields rows
    core.release(snap)
    core.release(snap)  # harmless twice
    assert core.live_count == 2
    core.close()
    assert core.live_count == 0


def test_step_without_inplace_keeps_the_input_state() -> None:
    core = OpenSpielEnv("connect_four")
    generator = torch.Generator().manual_seed(0)
    state = core.reset_state(2, generator)
    action = torch.tensor([3, 4])
    next_state, first = core.step_state(state, action, generator, inplace=False)
    _, second = core.step_state(state, action, generator, inplace=False)
    assert torch.equal(first[keys.OBS], second[keys.OBS])
    assert len(core.engine_state(state, 0).history()) == 0
    assert len(core.engine_state(next_state, 0).history()) == 1
    assert core.live_count == 6


def test_step_limit_truncates_with_every_seats_final_view() -> None:
    env = BatchedEnv(OpenSpielEnv("connect_four", max_episode_steps=5), 2, seed=0)
    out = env.reset()
    for tick in range(5):
        before = [env.env.engine_state(env.state, i).clone() for i in range(2)]
        action = torch.tensor([tick % 7, (tick + 2) % 7])
        out = env.step(action)
    assert out[keys.TRUNCATED].all()
    assert not out[keys.TERMINATED].any()
    assert out[keys.FINAL_OBS].shape == (2, 2, 3, 6, 7)
    for index in range(2):
        last = before[index]
        last.apply_action(int(action[index]))
        for seat in range(2):
            expected = torch.tensor(last.observation_tensor(seat)).reshape(3, 6, 7)
            assert torch.equal(out[keys.FINAL_OBS][index, seat], expected)
    assert bool(out[keys.IS_FIRST].all())
    assert out[keys.OBS].sum() == 6 * 7 * 2


def test_hearts_without_passing_never_passes() -> None:
    """game_kwargs reach the engine; OpenSpiel's hearts lists four pass directions even with pass_cards=false."""
    core = OpenSpielEnv("open_spiel:hearts", {"pass_cards": False})
    state = core.reset_state(16, torch.Generator().manual_seed(0))
    assert all(core.engine_state(state, i).history()[0] == 0 for i in range(16))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"env_id": "open_spiel:heartz"}, "OpenSpiel has no game 'heartz' (close: hearts"),
    ({"env_id": "hearts", "game_kwargs": {"passcards": False}},
     "hearts has no parameter 'passcards' (close: pass_cards"),
    ({"env_id": "hearts", "game_kwargs": {"pass_cards": "no"}}, "game_kwargs.pass_cards='no': hearts expects bool"),
    ({"env_id": "connect_four", "game_kwargs": {"rows": 1.5}}, "connect_four expects int values for 'rows'"),
    ({"env_id": "goofspiel"}, "simultaneous-move game; OpenSpielEnv plays turn-based games: write env_id: "
                              "'open_spiel:turn_based_simultaneous_game(game=goofspiel())'"),
    ({"env_id": "stones_and_gems"}, "sampled stochastic"),
    ({"env_id": "hearts", "observation": "observation"}, "does not provide that tensor; use observation: info_state"),
    ({"env_id": "hearts", "observation": "pixels"}, "observation='pixels' is not a choice"),
])  # fmt: skip
def test_bad_input_is_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        OpenSpielEnv(**kwargs)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_simultaneous_game_loads_turn_based_as_suggested() -> None:
    env = OpenSpielEnv("open_spiel:turn_based_simultaneous_game(game=goofspiel())")
    assert env.spec.num_seats == 2
    assert pyspiel.load_game("goofspiel").num_distinct_actions() == env.spec.num_actions


def test_an_envspec_saved_before_the_seat_fields_loads_with_single_seat_defaults(tmp_path) -> None:
    """Checkpoints store the EnvSpec; one pickled before num_seats/perfect_information existed must still load."""
    from rl_lightning.envs.base import EnvSpec

    spec = EnvSpec("CartPole", (4,), True, 2)
    old = EnvSpec.__new__(EnvSpec)
    state = {k: v for k, v in vars(spec).items() if k not in ("num_seats", "perfect_information")}
    object.__setattr__(old, "__dict__", state)  # what an older version pickled
    torch.save({"spec": old}, tmp_path / "old.pt")
    loaded = torch.load(tmp_path / "old.pt", weights_only=True)["spec"]
    assert "num_seats" not in vars(loaded)
    assert loaded.num_seats == 1
    assert loaded.perfect_information is True


def test_check_mode_names_an_illegal_card() -> None:
    env = BatchedEnv(OpenSpielEnv("open_spiel:hearts", {"pass_cards": False}), 2, seed=0, check=True)
    out = env.reset()
    illegal = (~out[keys.ACTION_MASK]).int().argmax(-1)
    with pytest.raises(ValueError, match=r"open_spiel:hearts: action \d+ in env 0 is masked \(illegal\)"):
        env.step(illegal)


@pytest.mark.parametrize(("module", "make"), [
    ("pyspiel", lambda: OpenSpielEnv("open_spiel:hearts")),
    ("pettingzoo", lambda: PettingZooEnv("classic/tictactoe-v3")),
])  # fmt: skip
def test_without_the_games_extra_the_error_says_what_to_install(monkeypatch, module: str, make) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    with pytest.raises(ConfigError, match=r'install the games extra: pip install -e "\.\[games\]"'):
        make()


def test_a_deep_copy_continues_identically() -> None:
    env = BatchedEnv(OpenSpielEnv("open_spiel:hearts"), 2, seed=0)
    out, generator = env.reset(), torch.Generator().manual_seed(0)
    for _ in range(30):
        out = env.step(random_actions(out, generator))
    twin = copy.deepcopy(env)
    for _ in range(50):
        action = random_actions(out, generator)
        out, twin_out = env.step(action), twin.step(action)
        assert torch.equal(out[keys.OBS], twin_out[keys.OBS])
        assert torch.equal(out[keys.REWARD], twin_out[keys.REWARD])
    assert twin.env.live_count == 2


#: A Hanabi small enough for tests (8 actions, 84 features), paying a point per card played during the game.
TINY_HANABI = {"players": 2, "colors": 2, "ranks": 2, "hand_size": 2, "max_information_tokens": 3, "max_life_tokens": 1}


def test_rewards_during_play_sum_to_the_games_returns() -> None:
    """Hanabi pays during play, and ``state.rewards()`` after the card draw (a chance node) still reports the move
    before it: each tick must credit the change of ``returns()``, so a game's rewards sum to its returns."""
    core = OpenSpielEnv("open_spiel:hanabi", TINY_HANABI)
    generator = torch.Generator().manual_seed(0)
    state = core.reset_state(32, generator)
    out = core.observe(state)
    running = torch.zeros(32, 2, dtype=torch.float64)
    credited, returns = [], []
    for _ in range(600):
        state, out = core.step_state(state, random_actions(out, generator), generator, inplace=True)
        running += out[keys.REWARD].double()
        ended = out[keys.TERMINATED] | out[keys.TRUNCATED]
        credited.append(running[ended].clone())
        returns.append(out[GAME_SCORE][ended].double())  # the engine's returns() of the games that ended
        running[ended] = 0.0
    credited, returns = torch.cat(credited), torch.cat(returns)
    assert len(returns) > 300
    assert (returns != 0).float().mean() > 0.1  # games that score: the check is not vacuous (a bomb-out scores 0)
    torch.testing.assert_close(credited, returns)
    core.close()


def test_a_snapshot_credits_what_the_original_credits_in_a_game_paying_during_play() -> None:
    core = OpenSpielEnv("open_spiel:hanabi", TINY_HANABI)
    generator = torch.Generator().manual_seed(1)
    state = core.reset_state(8, generator)
    out = core.observe(state)
    for _ in range(3):
        state, out = core.step_state(state, random_actions(out, generator), generator, inplace=True)
    snap = core.snapshot(state)
    draws = torch.Generator().manual_seed(2)
    for _ in range(20):
        action = random_actions(out, draws)
        state, out = core.step_state(state, action, generator, inplace=True)
        snap, again = core.step_state(snap, action, generator, inplace=True)
        torch.testing.assert_close(out[keys.REWARD], again[keys.REWARD])
    core.close()


def test_an_envspec_with_integer_observations_writes_to_yaml_and_loads_back(tmp_path) -> None:
    """Lightning writes the module's hyper-parameters (``env_spec``) to ``hparams.yaml``; PyYAML could not write a
    ``torch.int8`` (PettingZoo's Connect Four), and the run died at start-up. Saved dtypes are names now; a spec
    pickled with the dtype itself (older checkpoints) still loads."""
    import pickle

    import yaml
    from lightning.pytorch.core.saving import save_hparams_to_yaml

    from rl_lightning.envs.base import EnvSpec, ObsLeaf

    leaf = ObsLeaf((6, 7, 2), torch.int8)
    spec = EnvSpec("classic/connect_four-v3", (6, 7, 2), True, 7, obs_dtype=torch.int8, obs_keys=((("b",), leaf),))
    save_hparams_to_yaml(tmp_path / "hparams.yaml", {"env_spec": spec, "lr": 0.1})
    text = (tmp_path / "hparams.yaml").read_text()
    assert "obs_dtype: int8" in text
    assert yaml.unsafe_load(text)["env_spec"] == spec
    assert pickle.loads(pickle.dumps(spec)) == spec
    torch.save({"spec": spec}, tmp_path / "spec.pt")
    assert torch.load(tmp_path / "spec.pt", weights_only=True)["spec"].obs_dtype is torch.int8
    old = EnvSpec.__new__(EnvSpec)
    old.__setstate__(dict(vars(spec)))  # what unpickling a spec saved with torch.int8 in it does
    assert old == spec
