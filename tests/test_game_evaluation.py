"""GameEvaluation: the panel played during a fit and logged against env steps, ``rl-lightning test`` replaying it
from a checkpoint, and its bad inputs refused in one line before any work."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml
from lightning.pytorch.loggers import TensorBoardLogger

from rl_lightning.algos import PPO
from rl_lightning.callbacks import GameEvaluation
from rl_lightning.data import OnPolicyDataModule
from rl_lightning.errors import ConfigError
from rl_lightning.games import PolicyBot, match_metrics, play_match
from tests.cli_subprocess import error_line, run_cli
from tests.game_match_toys import CountingMinBot, HighCard, MinBot, StallCard
from tests.helpers import trainer

MIN_BOT = "tests.game_match_toys:MinBot"


def _scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar a run wrote to TensorBoard, as (step, value) pairs (TensorBoard's own reader)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_fit_logs_each_opponent_and_the_rating_table_at_env_steps(tmp_path: Path) -> None:
    env = HighCard(seats=2, seat_bonus=0.0)
    datamodule = OnPolicyDataModule(env, num_envs=4, num_steps=8, total_env_steps=64,
                                    league={"size": 2, "snapshot_every_n_updates": 1})  # fmt: skip
    module = PPO(env_spec=env.spec, hidden_sizes=(8,), update_epochs=1, num_minibatches=1)
    callback = GameEvaluation(every_n_env_steps=32, opponents=["random", MIN_BOT, "league"], num_games=20)
    logger = TensorBoardLogger(str(tmp_path), name="games")
    trainer(tmp_path, [callback], logger=logger).fit(module, datamodule)
    logged = _scalars(Path(logger.log_dir))
    for name in ("random", "MinBot"):
        for key in ("win_rate", "win_rate_low", "win_rate_high", "draw_rate", "loss_rate", "return_per_game",
                    "return_per_game_low", "return_per_game_high", "baseline_return_per_game", "baseline_win_rate",
                    "p_value", "p_value_win_rate"):  # fmt: skip
            assert [step for step, _ in logged[f"eval/vs_{name}/{key}"]] == [32, 64], (name, key)
    for player in ("policy", "random", "MinBot", "league_v0"):  # league_v0: the snapshot taken before update 1
        assert [step for step, _ in logged[f"eval/rating/{player}"]] == [32, 64], player
    assert logged["eval/rating/random"] == [(32, 0.0), (64, 0.0)]  # the anchor
    # The logged baseline is MinBot's own score in the policy's seats over the same deals (its card: seat 0 bonus 0).
    baseline = match_metrics(play_match(env, MinBot(), MinBot(), 10, seed=callback.seed))["return_per_game"]
    assert logged["eval/vs_MinBot/baseline_return_per_game"][-1][1] == pytest.approx(baseline)
    assert callback.history[-1]["eval/vs_MinBot/win_rate"] == pytest.approx(logged["eval/vs_MinBot/win_rate"][-1][1])


def _config(path: Path, name: str, **evaluation: Any) -> str:
    callbacks = [{"class_path": "rl_lightning.callbacks.RLCheckpoint", "init_args": {"every_n_updates": 1,
                                                                                      "save_last": True}},
                 {"class_path": "rl_lightning.callbacks.GameEvaluation",
                  "init_args": {"every_n_env_steps": 32, "opponents": ["random", MIN_BOT], "num_games": 20,
                                **evaluation}}]  # fmt: skip
    config = {
        "model": {"init_args": {"hidden_sizes": [8], "update_epochs": 1, "num_minibatches": 1}},
        "data": {"init_args": {"env": {"class_path": "tests.game_match_toys.HighCard",
                                       "init_args": {"seats": 2, "seat_bonus": 0.0}},
                               "num_envs": 4, "num_steps": 8, "total_env_steps": 64}},
        "trainer": {"enable_progress_bar": False, "callbacks": callbacks,
                    "logger": {"init_args": {"save_dir": "runs", "name": name}}},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_cli_test_plays_the_same_panel_from_a_checkpoint(tmp_path: Path) -> None:
    fit = run_cli(["fit", "--config", "ppo", "--config", _config(tmp_path / "fit.yaml", "fit")], tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    ckpt = tmp_path / "runs" / "fit" / "version_0" / "checkpoints" / "last.ckpt"
    config = _config(tmp_path / "test.yaml", "tested")
    result = run_cli(["test", "--config", "ppo", "--config", config, "--ckpt_path", str(ckpt)], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    logged = {tag: values[-1][1] for tag, values in _scalars(tmp_path / "runs" / "tested" / "version_0").items()}
    assert "test/episode_return" not in logged  # a multi-seat game plays the panel, not single-agent episodes
    assert {"test/rating/policy", "test/rating/MinBot", "test/vs_random/p_value"} <= set(logged)
    # The same matches, replayed here from the checkpoint's weights, give the logged figures.
    module = PPO.load_from_checkpoint(str(ckpt), weights_only=False).eval()
    replay = match_metrics(play_match(HighCard(seats=2, seat_bonus=0.0), PolicyBot(module, seed=12_345), MinBot(),
                                      10, seed=12_345))  # fmt: skip
    for key in ("win_rate", "draw_rate", "return_per_game", "p_value"):
        assert logged[f"test/vs_MinBot/{key}"] == pytest.approx(replay[key], rel=1e-6), key
    # The checkpoint as an opponent (``opponents: [path/to.ckpt]``): named by its file stem, the same greedy player.
    from rl_lightning.games.panel import resolve_panel

    (opponent,) = resolve_panel([str(ckpt)], HighCard(seats=2), None, True, torch.device("cpu"))
    assert opponent.name == "last"
    itself = match_metrics(play_match(HighCard(seats=2, seat_bonus=0.0), PolicyBot(module, True), opponent.bot, 10))
    assert itself["return_per_game"] == itself["baseline_return_per_game"]
    assert itself["p_value"] == 1.0


def test_cli_refuses_games_that_cannot_rotate_seats_before_training(tmp_path: Path) -> None:
    config = _config(tmp_path / "bad.yaml", "bad", num_games=21)
    line = error_line(run_cli(["fit", "--config", "ppo", "--config", config], tmp_path))
    assert "num_games=21 is not a multiple of the game's 2 seats" in line
    assert "use 22" in line
    assert not list(tmp_path.rglob("*.ckpt"))  # refused before the first update


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"opponents": ["randum"]}, "opponents[0]='randum' is not an opponent; use random, heuristic, league"),
        ({"opponents": ["missing.ckpt"]}, "opponents[0]='missing.ckpt': no such checkpoint file"),
        ({"opponents": []}, "opponents is empty"),
        ({"num_games": 0}, "num_games=0 must be >= 1"),
        ({"every_n_updates": None}, "set exactly one of every_n_updates or every_n_env_steps"),
    ],
)
def test_bad_settings_fail_at_construction(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        GameEvaluation(**{"every_n_updates": 1, **kwargs})


@pytest.mark.parametrize(
    ("opponents", "message"),
    [
        (["heuristic"], "opponents lists 'heuristic' but HighCard has no bundled heuristic"),
        (["league"], "opponents lists 'league' but the run has no league; set data.league"),
        (["tests.game_match_toys:NoSuchBot"], "opponent='tests.game_match_toys:NoSuchBot' does not import"),
        (["random", "random"], "name the player(s) ['random'] more than once"),
    ],
)
def test_an_opponent_that_cannot_play_fails_at_setup(opponents: list[str], message: str) -> None:
    callback = GameEvaluation(every_n_updates=1, opponents=opponents, num_games=8, env=HighCard())
    fake = SimpleNamespace(datamodule=SimpleNamespace(selfplay=None))
    with pytest.raises(ConfigError) as caught:
        callback.setup(fake, SimpleNamespace(device=torch.device("cpu")), "fit")
    assert message in str(caught.value)


def test_validate_and_test_without_the_callback_play_a_default_panel() -> None:
    from rl_lightning.callbacks.game_evaluation import game_evaluation_for

    run = SimpleNamespace(callbacks=[], datamodule=SimpleNamespace(env=HighCard(seats=3)), lightning_module=None)
    with game_evaluation_for(run) as default:
        assert default.opponents == ["random"]  # HighCard has no bundled heuristic
        assert default.num_games == 300  # 100 deals per seat
    configured = GameEvaluation(every_n_updates=1)
    with game_evaluation_for(SimpleNamespace(callbacks=[configured])) as found:
        assert found is configured


def test_heuristic_names_the_games_bundled_bot() -> None:
    pytest.importorskip("pyspiel")
    pytest.importorskip("pettingzoo")
    from rl_lightning.envs.games import OpenSpielEnv
    from rl_lightning.envs.games.bots import ConnectFourHeuristic, HeartsHeuristic
    from rl_lightning.envs.games.pettingzoo import PettingZooEnv
    from rl_lightning.games.panel import resolve_panel

    for env, bot in ((OpenSpielEnv("open_spiel:hearts"), HeartsHeuristic),
                     (OpenSpielEnv("open_spiel:connect_four"), ConnectFourHeuristic),
                     (PettingZooEnv("classic/connect_four-v3"), ConnectFourHeuristic)):  # fmt: skip
        panel = resolve_panel(["random", "heuristic"], env, None, None, torch.device("cpu"))
        assert [p.name for p in panel] == ["random", "heuristic"]
        assert isinstance(panel[1].bot, bot), env.spec.name
    # Through PettingZoo the heuristic beats random as a game player judges it: a win rate, its interval, a test.
    metrics = match_metrics(play_match(env, panel[1].bot, panel[0].bot, 20, seed=0))
    assert metrics["win_rate_low"] > 0.5
    assert metrics["p_value_win_rate"] < 0.01


def test_cut_games_are_logged_apart_from_the_results() -> None:
    """Every cut game (MinBot stalls on a low card) is counted in ``games_cut`` and none in ``games``."""
    env = StallCard()
    module = PPO(env_spec=env.spec, hidden_sizes=(8,))
    callback = GameEvaluation(every_n_updates=1, opponents=[MIN_BOT], num_games=40, rating_games=0, env=env)
    metrics = callback.measure(SimpleNamespace(), module)
    games, cut = metrics["eval/vs_MinBot/games"], metrics["eval/vs_MinBot/games_cut"]
    assert cut > 0
    assert games + cut <= 40  # duplicate: a deal with a cut game is left out whole
    replay = match_metrics(play_match(env, PolicyBot(module, seed=callback.seed), MinBot(), 20, seed=callback.seed))
    assert (games, cut) == (replay["games"], replay["games_cut"])


@pytest.mark.parametrize("deterministic", [False, True])
def test_load_policy_acts_as_the_runs_game_evaluation_did(tmp_path: Path, deterministic: bool) -> None:
    """``load_policy``'s default read only ``Evaluation*`` callbacks: a game run evaluated with
    ``GameEvaluation(deterministic: false)`` loaded greedy."""
    from rl_lightning.callbacks import RLCheckpoint
    from rl_lightning.inference import load_policy

    env = HighCard(seats=2, seat_bonus=0.0)
    datamodule = OnPolicyDataModule(env, num_envs=4, num_steps=8, total_env_steps=32)
    module = PPO(env_spec=env.spec, hidden_sizes=(8,), update_epochs=1, num_minibatches=1)
    evaluation = GameEvaluation(every_n_updates=1, opponents=["random"], num_games=4, rating_games=0,
                                deterministic=deterministic)  # fmt: skip
    checkpoint = RLCheckpoint(dirpath=str(tmp_path), every_n_updates=1)
    trainer(tmp_path, [evaluation, checkpoint], enable_checkpointing=True).fit(module, datamodule)
    assert load_policy(str(tmp_path / "last.ckpt")).deterministic is deterministic


def test_without_the_baseline_the_opponent_plays_only_the_policys_games_which_score_the_same() -> None:
    """``baseline: false`` skips the games of opponents only: the opponent moves in fewer rows, the policy's own
    results are those of the evaluation with the baseline (the same deals), and the baseline figures are NaN."""
    env = HighCard(seats=2)
    module = PPO(env_spec=env.spec, hidden_sizes=(8,))

    def measured(baseline: bool) -> tuple[dict[str, float], int]:
        CountingMinBot.rows = 0
        callback = GameEvaluation(every_n_updates=1, opponents=["tests.game_match_toys:CountingMinBot"],
                                  num_games=40, rating_games=0, env=env, baseline=baseline)  # fmt: skip
        return callback.measure(SimpleNamespace(), module), CountingMinBot.rows

    (full, full_rows), (lean, lean_rows) = measured(True), measured(False)
    assert 0 < lean_rows < full_rows
    prefix = "eval/vs_CountingMinBot/"
    for key in ("return_per_game", "return_per_game_low", "win_rate", "loss_rate", "games"):
        assert lean[prefix + key] == full[prefix + key], key
    assert not math.isnan(full[prefix + "baseline_win_rate"])
    assert math.isnan(lean[prefix + "baseline_win_rate"])
    assert math.isnan(lean[prefix + "p_value"])
