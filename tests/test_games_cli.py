"""Games through ``rl-lightning`` as a user runs them (a subprocess), with TensorBoard and CSV loggers both on.

A few updates each of PettingZoo's Connect Four and tic-tac-toe (swapped into a bundled config from the command
line, as docs/guides/games.md shows), an OpenSpiel game that pays during play (Hanabi), a PettingZoo game whose
seats leave before the end, and a user's own AEC game by module path; then each bad game input refused before any
work, in one line naming the field and the fix, with exit code 2.
"""

from __future__ import annotations

import csv
import math
import re
import shutil

import pytest

from tests.cli_subprocess import ROOT, error_line, run_cli, run_python, snapshot

pytest.importorskip("pyspiel", reason='needs pip install -e ".[games]"')
pytest.importorskip("pettingzoo", reason='needs pip install -e ".[games]"')

LOGGERS = (
    "[{class_path: lightning.pytorch.loggers.TensorBoardLogger, init_args: {save_dir: runs, name: tb}}, "
    "{class_path: lightning.pytorch.loggers.CSVLogger, init_args: {save_dir: runs, name: csv}}]"
)
#: Two games of two ticks x 8, one update epoch: what start-up, a rollout, an update and the logs need.
TINY = [
    "--data.init_args.num_envs", "2", "--data.init_args.num_steps", "8", "--data.init_args.total_env_steps", "32",
    "--model.init_args.hidden_sizes", "[16]", "--model.init_args.update_epochs", "1",
    "--model.init_args.num_minibatches", "1", "--trainer.enable_progress_bar", "false", "--trainer.logger", LOGGERS,
]  # fmt: skip
#: The documented swap of a game into the bundled Connect Four config: the env class and id, the league's and the
#: panel's game-specific bots (callbacks/game_eval.yaml replaces the config's GameEvaluation: random only).
SWAP = ["--config", "ppo_connect_four.yaml", "--config", "callbacks/game_eval.yaml",
        "--data.init_args.env.class_path", "rl_lightning.envs.games.PettingZooEnv"]  # fmt: skip

GAME_YAML = """
seed_everything: 2
model:
  class_path: rl_lightning.algos.PPO
data:
  class_path: rl_lightning.data.OnPolicyDataModule
  init_args:
    env: {env}
    seats: {seats}
trainer:
  accelerator: cpu
  callbacks:
    - class_path: rl_lightning.callbacks.GameEvaluation
      init_args: {{every_n_updates: 1, opponents: [random], num_games: {games}, rating_games: 0, batch_size: 8}}
"""


def _game_config(tmp_path, env: str, seats: str = "null", games: int = 4) -> str:
    path = tmp_path / "game.yaml"
    path.write_text(GAME_YAML.format(env=env, seats=seats, games=games))
    return str(path)


def _fits_with_both_loggers(tmp_path, args: list[str]) -> None:
    result = run_cli(["fit", *args, *TINY], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    tb, csv_dir = next((tmp_path / "runs" / "tb").iterdir()), next((tmp_path / "runs" / "csv").iterdir())
    for run in (tb, csv_dir):  # the module's env_spec (integer observations included) reached both YAML files
        assert "env_spec:" in (run / "hparams.yaml").read_text()
    events = b"".join(path.read_bytes() for path in tb.glob("events.out.tfevents.*"))
    assert b"train/loss" in events
    assert b"eval/vs_random/" in events
    with (csv_dir / "metrics.csv").open() as file:
        header = next(csv.reader(file))
    assert "train/loss" in header
    assert any(key.startswith("eval/vs_random/") for key in header)


@pytest.mark.parametrize("env_id", ["classic/connect_four-v3", "classic/tictactoe-v3"])
def test_pettingzoo_classic_games_swapped_into_the_bundled_config_train(tmp_path, env_id):
    """Bug: integer observations (int8) crashed Lightning's hparams.yaml writer at start-up. tic-tac-toe also needs
    the league's Connect Four bot swapped out (a bot that does not fit is refused) and takes seats by agent name."""
    args = [*SWAP, "--data.init_args.env.init_args.env_id", env_id]
    if "tictactoe" in env_id:  # agents player_1 and player_2: seat 1 plays at random
        args += ["--data.init_args.league.bots", "{random: 0.5}", "--data.init_args.seats", "{player_2: random}"]
    else:  # a short panel with the bundled heuristic, which reads PettingZoo's board layout too
        args += ["--config", "{trainer: {callbacks+: [{class_path: rl_lightning.callbacks.GameEvaluation, init_args: "
                 "{every_n_updates: 1, opponents: [random, heuristic], num_games: 4, rating_games: 0}}]}}"]
    _fits_with_both_loggers(tmp_path, args)


def test_an_open_spiel_game_paying_during_play_trains(tmp_path):
    env = ("{class_path: rl_lightning.envs.games.OpenSpielEnv, init_args: {env_id: 'open_spiel:hanabi', game_kwargs: "
           "{players: 2, colors: 2, ranks: 2, hand_size: 2, max_information_tokens: 3, max_life_tokens: 1}}}")
    _fits_with_both_loggers(tmp_path, ["--config", _game_config(tmp_path, env)])


def test_a_game_whose_seats_leave_before_the_end_trains(tmp_path):
    env = ("{class_path: rl_lightning.envs.games.PettingZooEnv, init_args: {env_id: 'tests.games_envs:LastOneStanding',"
           " env_kwargs: {length: 40}, max_episode_steps: 5}}")
    _fits_with_both_loggers(tmp_path, ["--config", _game_config(tmp_path, env, seats="{c: random}", games=6)])


def test_a_users_own_aec_game_by_module_path_trains(tmp_path):
    package = tmp_path / "my_games"  # the user's package, outside this repository, importable from the cwd
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(ROOT / "tests" / "games_envs.py", package / "parcel.py")
    env = "{class_path: rl_lightning.envs.games.PettingZooEnv, init_args: {env_id: my_games.parcel}}"
    _fits_with_both_loggers(tmp_path, ["--config", _game_config(tmp_path, env, games=6)])


BAD_GAME_INPUTS = [
    pytest.param(
        [*SWAP, "--data.init_args.env.init_args.env_id", "tests.games_envs:SimultaneousSum",
         "--data.init_args.league", "null"],
        "env_id='tests.games_envs:SimultaneousSum': agent 'left' has no action mask (neither obs['action_mask'] nor "
        "infos[agent]['action_mask']), so illegal moves cannot be masked; add one, or declare that every action is "
        "always legal with all_actions_legal: true", id="no-mask"),
    pytest.param(
        [*SWAP, "--data.init_args.env.init_args.env_id", "classic/tictactoe-v3"],
        "data.league.bots: 'rl_lightning.envs.games.bots.ConnectFourHeuristic': the bot does not fit "
        "classic/tictactoe-v3 (ValueError: ConnectFourHeuristic reads", id="league-bot-of-another-game"),
    pytest.param(
        [*SWAP, "--data.init_args.env.init_args.env_id", "classic/tictactoe-v3", "--data.init_args.league", "null",
         "--data.init_args.seats", "{1: rl_lightning.envs.games.bots.ConnectFourHeuristic}"],
        "data.seats[1]='rl_lightning.envs.games.bots.ConnectFourHeuristic': the bot does not fit classic/tictactoe-v3",
        id="seat-bot-of-another-game"),
    pytest.param(
        [*SWAP, "--data.init_args.env.init_args.env_id", "classic/tictactoe-v3", "--data.init_args.league", "null",
         "--data.init_args.seats", "{player_3: random}"],
        "data.seats names seat 'player_3', but 'classic/tictactoe-v3' has seats 0..1 named ['player_1', 'player_2']",
        id="unknown-agent-name"),
    pytest.param(
        ["--config", "ppo_tictactoe.yaml", "--data.init_args.env", "rl_lightning.envs.games.OpenSpielEnv",
         "--data.init_args.env.init_args.env_id", "open_spiel:tic_tac_toe"],
        "trainer.callbacks: Evaluation plays single-agent episodes, but 'open_spiel:tic_tac_toe' has 2 seats; evaluate "
        "a game with rl_lightning.callbacks.GameEvaluation instead", id="evaluation-on-a-game"),
    pytest.param(
        [*SWAP, "--data.init_args.env.init_args.env_id", "classic/tictactoe-v3", "--data.init_args.league", "null",
         "--config", "{trainer: {callbacks+: [{class_path: rl_lightning.callbacks.GameEvaluation, init_args: "
         "{every_n_updates: 1, opponents: [rl_lightning.envs.games.bots.ConnectFourHeuristic], num_games: 4}}]}}"],
        "GameEvaluation: opponents entry 'rl_lightning.envs.games.bots.ConnectFourHeuristic': the bot does not fit "
        "classic/tictactoe-v3", id="panel-bot-of-another-game"),
    pytest.param(
        ["--config", "ppo.yaml", "--config", "callbacks/game_eval.yaml"],
        "trainer.callbacks: GameEvaluation plays matches of multi-seat games, but 'CartPole' has one seat",
        id="game-evaluation-on-one-seat"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "expected"), BAD_GAME_INPUTS)
def test_bad_game_input_is_one_line_before_any_work(tmp_path, args, expected):
    (tmp_path / "notes.txt").write_text("a file the failed run must leave alone\n")
    before = snapshot(tmp_path)
    result = run_cli(["fit", *args, *TINY], tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert expected in error_line(result)
    assert snapshot(tmp_path) == before


def test_testing_a_checkpoint_logs_beside_its_run_without_warnings(tmp_path):
    """``rl-lightning test --ckpt_path last`` opened a new ``version_N`` folder for a handful of numbers and warned
    that the checkpoint callback's folder had changed; the numbers go under the fit run now (``version_0/test``),
    say which seat the policy sat in, and their intervals stay within tic-tac-toe's [-1, 1]."""
    args = [*SWAP[:4], "--data.init_args.env.init_args.env_id", "open_spiel:tic_tac_toe",
            "--data.init_args.league.bots", "{random: 0.5}", *TINY[:-2],
            "--trainer.logger.init_args.save_dir", "runs", "--trainer.logger.init_args.name", "ttt"]  # fmt: skip
    fit = run_cli(["fit", *args], tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    result = run_cli(["test", *args, "--ckpt_path", "last"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dirpath has changed" not in result.stderr
    runs = tmp_path / "runs" / "ttt"
    assert sorted(path.name for path in runs.iterdir()) == ["version_0"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(runs / "version_0" / "test"))
    events.Reload()
    logged = {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"]}
    assert {"test/vs_random/return_per_game_seat0", "test/vs_random/win_rate_seat1"} <= set(logged)
    assert -1.0 <= logged["test/vs_random/return_per_game_low"] <= logged["test/vs_random/return_per_game_high"] <= 1.0

    # The docs' game example of load_policy (flat observation_tensor reshaped, action_mask=), on this checkpoint.
    docs = (ROOT / "docs" / "guides" / "games.md").read_text()
    example = re.search(r"<!-- game-inference-example -->\s*```python\n(.*?)```", docs, re.S).group(1)
    ckpt = runs / "version_0" / "checkpoints" / "last.ckpt"
    played = run_python(["-c", example.replace("runs/ppo_tictactoe/version_0/checkpoints/last.ckpt", str(ckpt))])
    assert played.returncode == 0, played.stderr[-3000:]
    assert played.stdout.strip().splitlines()[-1].startswith("returns: [")


def test_the_mcts_fragment_plays_openspiels_mctsbot_without_baseline_games(tmp_path):
    """``callbacks/game_eval_mcts.yaml`` (the Connect Four suite's evaluation) swapped into a tic-tac-toe fit: the
    policy's record against MCTSBot-100 is logged, its baseline (MCTSBot against itself) is not played."""
    args = [*SWAP[:2], "--config", "callbacks/game_eval_mcts.yaml", "--data.init_args.env.init_args.env_id",
            "open_spiel:tic_tac_toe", "--data.init_args.league", "null", *TINY[:-2],
            "--trainer.logger.init_args.save_dir", "runs", "--trainer.logger.init_args.name", "ttt"]  # fmt: skip
    fit = run_cli(["fit", *args], tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "runs" / "ttt" / "version_0"))
    events.Reload()
    logged = {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"]}
    assert logged["eval/vs_OpenSpielMCTSBot/games"] == 100
    assert 0.0 <= logged["eval/vs_OpenSpielMCTSBot/win_rate"] <= 0.5  # an untrained network rarely beats a search
    assert math.isnan(logged["eval/vs_OpenSpielMCTSBot/baseline_win_rate"])
