"""``HeartsFeatures`` (the ``hearts`` encoder): OpenSpiel Hearts' information state decoded for the acting seat.

Checked against a naive decoding of the engine's own state (``state.to_json()``: hands, passes, tricks with who
played what, points, hearts broken) at every decision of random games, with and without passing; against states
whose hidden hands differ (OpenSpiel's ``resample_from_infostate``); and in the exported ONNX graph.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

pytest.importorskip("pyspiel")

import pyspiel  # noqa: E402

from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402
from rl_lightning.errors import ConfigError  # noqa: E402
from rl_lightning.networks.encoders import ObsEncoder  # noqa: E402
from rl_lightning.networks.hearts import OUT_DIM, HeartsFeatures  # noqa: E402

RANKS, SUITS, SEATS = "23456789TJQKA", "CDHS", "NESW"
DIRECTIONS = {"No Pass": 0, "Left": 1, "Across": 2, "Right": 3}


def card(name: str) -> int:
    return RANKS.index(name[0]) * 4 + SUITS.index(name[1])


def cards(names: list[str]) -> np.ndarray:
    out = np.zeros(52, dtype=np.float32)
    out[[card(n) for n in names]] = 1.0
    return out


def naive_features(state: object, me: int, jd_bonus: bool = False) -> np.ndarray:
    """The features of seat ``me`` read from the engine's state, by plain loops over its tricks (``jd_bonus``: the
    jack of diamonds counts -10 points)."""
    view = json.loads(state.to_json())
    rel = lambda seat: (SEATS.index(seat) - me) % 4  # noqa: E731
    direction = DIRECTIONS[view["pass_direction"]]
    tricks = [[(rel(seat), card(c)) for seat, c in trick] for trick in view["tricks"]]
    tricks = [trick for trick in tricks if trick]
    current = tricks[-1] if tricks and len(tricks[-1]) < 4 else []
    finished = [trick for trick in tricks if len(trick) == 4]
    played = np.zeros(52, dtype=np.float32)
    for trick in tricks:
        for _, c in trick:
            played[c] = 1.0
    hand = cards(view["hands"][me])
    passed = cards(view["passed_cards"][me])
    everyone_passed = all(len(p) == 3 for p in view["passed_cards"])
    received = cards(view["received_cards"][me]) if everyone_passed else np.zeros(52, np.float32)
    current_by_seat = np.zeros((3, 52), dtype=np.float32)
    for seat, c in current:
        if seat:
            current_by_seat[seat - 1, c] = 1.0
    led_suit, trick_points = np.zeros(4, np.float32), 0.0
    if current:
        led_suit[current[0][1] % 4] = 1.0
        trick_points = sum(13.0 if c == 43 else -10.0 * jd_bonus if c == 37 else float(c % 4 == 2) for _, c in current)
    finished_cards = np.zeros(52, dtype=np.float32)
    voids = np.zeros((4, 4), dtype=np.float32)
    for trick in tricks:
        for seat, c in trick:
            finished_cards[c] = float(trick in finished)
            if c % 4 != trick[0][1] % 4:
                voids[seat, trick[0][1] % 4] = 1.0
    points = np.array([view["points"][(me + r) % 4] for r in range(4)], dtype=np.float32) / 26.0
    position = np.eye(4, dtype=np.float32)[len(current)]
    return np.concatenate([
        hand, np.eye(4, dtype=np.float32)[direction], [float(view["phase"] == "Pass")], passed, received,
        current_by_seat.reshape(-1), led_suit, position, finished_cards, points, [trick_points / 26.0],
        voids.reshape(-1), [float(view["hearts_broken"])], passed * (1 - played), np.clip(1 - hand - played, 0, 1),
        np.eye(13, dtype=np.float32)[len(finished)],
    ])  # fmt: skip


def decisions(games: int, seed: int, **params: object) -> list:
    """Every decision state of ``games`` random Hearts games (copies)."""
    game = pyspiel.load_game("hearts", params)
    rng, out = random.Random(seed), []
    for _ in range(games):
        state = game.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                state.apply_action(rng.choice([a for a, _ in state.chance_outcomes()]))
                continue
            out.append(state.clone())
            state.apply_action(rng.choice(state.legal_actions()))
    return out


def features(states: list, seats: list[int] | None = None, encoder: torch.nn.Module | None = None) -> torch.Tensor:
    seats = [s.current_player() for s in states] if seats is None else seats
    rows = [s.information_state_tensor(p) for s, p in zip(states, seats, strict=True)]
    obs = torch.tensor(np.array(rows, dtype=np.float32))
    return (encoder or HeartsFeatures())(obs)


#: OpenSpiel's Hearts rule variants: each either changes what a feature means (decoded for it) or only the legal
#: moves and the final score; every one is checked against the engine's own state.
VARIANTS = [{}, {"pass_cards": False}, {"qs_breaks_hearts": False}, {"must_break_hearts": False}, {"jd_bonus": True},
            {"no_pts_on_first_trick": False}, {"can_lead_any_club": True}, {"avoid_all_tricks_bonus": True},
            {"can_lead_hearts_instead_of_qs": True},
            {"qs_breaks_hearts": False, "jd_bonus": True, "no_pts_on_first_trick": False}]  # fmt: skip


@pytest.mark.parametrize("params", VARIANTS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "defaults")
def test_features_match_a_naive_decoding_of_the_engine_state(params: dict) -> None:
    """Bug: the decoding assumed the default rules, so with ``qs_breaks_hearts=False`` its "hearts broken" feature
    differed from the engine's at 120 of 1,516 decisions; it is built for the env's rules (``EnvSpec.game_params``)."""
    states = decisions(4, seed=len(params) + 7 * sum(map(len, params)), **params)
    encoder = ObsEncoder(OpenSpielEnv("open_spiel:hearts", game_kwargs=params).spec, "hearts")
    got = features(states, encoder=encoder).numpy()
    assert got.shape == (len(states), OUT_DIM)
    for index, state in enumerate(states):
        want = naive_features(state, state.current_player(), jd_bonus=params.get("jd_bonus", False))
        mismatch = np.flatnonzero(np.abs(got[index] - want) > 1e-6)
        assert not len(mismatch), f"decision {index} ({state.history_str()}): features {mismatch.tolist()} differ"


def test_features_do_not_read_other_seats_hands() -> None:
    """States with the same public history and the acting seat's cards but other hidden hands give the same
    features (OpenSpiel resamples the hidden hands consistently with what the seat has seen)."""
    states = decisions(3, seed=5)[::7]
    rng = random.Random(0)
    differ = 0
    for state in states:
        me = state.current_player()
        other = state.resample_from_infostate(me, rng.random)
        hidden = [json.loads(s.to_json())["hands"] for s in (state, other)]
        differ += hidden[0] != hidden[1]
        assert hidden[0][me] == hidden[1][me]
        assert torch.equal(features([state], [me]), features([other], [me]))
    assert differ >= len(states) // 2  # the check has teeth: most resampled states hide other cards


def test_features_are_the_same_in_the_exported_onnx_graph(tmp_path) -> None:
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from rl_lightning.algos import PPO
    from rl_lightning.export.policy_graph import PPOGraph
    from rl_lightning.export.writers import write

    states = decisions(2, seed=3)
    obs = torch.tensor(np.array([s.information_state_tensor(s.current_player()) for s in states], dtype=np.float32))
    mask = torch.tensor(np.array([s.legal_actions_mask(s.current_player()) for s in states]), dtype=torch.bool)
    torch.manual_seed(0)
    module = PPO(OpenSpielEnv("open_spiel:hearts").spec, hidden_sizes=(16,), encoder="hearts").eval()
    graph = PPOGraph(module, "bool", stochastic=False).eval()
    write(graph, "onnx", tmp_path / "hearts.onnx")
    session = ort.InferenceSession(str(tmp_path / "hearts.onnx"), providers=["CPUExecutionProvider"])
    action, logits = session.run(None, {"obs": obs.numpy(), "action_mask": mask.numpy()})
    with torch.no_grad():
        want = module.actor(module.encoder(obs)).masked_fill(~mask, float("-inf"))
    finite = mask.numpy()
    np.testing.assert_allclose(logits[finite], want.numpy()[finite], atol=1e-5)
    np.testing.assert_array_equal(action, want.argmax(-1).numpy())
    # The decoding alone, exported as the policy's first stage: the same features, exactly.
    features_graph = tmp_path / "features.onnx"
    program = torch.export.export(HeartsFeatures(), (obs[:2],), dynamic_shapes=({0: torch.export.Dim("b")},))
    torch.onnx.export(program, (), dynamo=True, input_names=["obs"]).save(str(features_graph))
    session = ort.InferenceSession(str(features_graph), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, {"obs": obs.numpy()})[0], HeartsFeatures()(obs).numpy())


def test_hearts_encoder_is_refused_for_other_observations() -> None:
    spec = OpenSpielEnv("open_spiel:connect_four").spec
    with pytest.raises(ConfigError, match=r"model.encoder='hearts' decodes OpenSpiel hearts' information state"):
        ObsEncoder(spec, "hearts")
    hearts = ObsEncoder(OpenSpielEnv("open_spiel:hearts").spec, "hearts")
    assert hearts.out_dim == OUT_DIM
    assert not list(hearts.parameters())
    assert not hearts.state_dict()


def test_the_rules_travel_with_the_spec_into_a_saved_policy() -> None:
    """The env's non-default rules reach ``EnvSpec.game_params`` however they are written, survive pickling (a
    checkpoint's ``env_spec``), and a spec saved before the field existed decodes the default rules."""
    import pickle

    from rl_lightning.algos import PPO

    assert OpenSpielEnv("open_spiel:hearts").spec.game_params == ()
    spec = OpenSpielEnv("open_spiel:hearts(qs_breaks_hearts=false,pass_cards=true)").spec
    assert spec.game_params == (("qs_breaks_hearts", False),)
    assert pickle.loads(pickle.dumps(spec)) == spec
    module = PPO(spec, hidden_sizes=(8,), encoder="hearts")
    reloaded = PPO(**{**dict(module.hparams), "env_spec": pickle.loads(pickle.dumps(spec))})
    assert reloaded.encoder.encoders[0].qs_breaks_hearts is False
    old = spec.__getstate__()
    old.pop("game_params")
    older = object.__new__(type(spec))
    older.__setstate__(old)
    assert older.game_params == ()
    assert ObsEncoder(older, "hearts").encoders[0].qs_breaks_hearts is True
