"""A checkpoint of another game as a player: refused in one line naming both games, before any env step.

One short tic-tac-toe fit (the bundled ``ppo_tictactoe.yaml``, 128 env steps) writes the checkpoint; Connect Four then
names it as a seat, as a league bot and as a ``GameEvaluation`` opponent (each ran into a 130-line traceback at the
first rollout or, for the opponent, at the first evaluation after training), and a match is handed a policy of
that checkpoint's class trained on another game (``play_games``). ``init_weights`` gives the same line already.
"""

from __future__ import annotations

import pytest

from tests.cli_subprocess import ROOT, error_line, run_cli, snapshot

pytest.importorskip("pyspiel", reason='needs pip install -e ".[games]"')

#: A fit of a few updates on two games at a time: what start-up and a first rollout need.
TINY = [
    "--data.init_args.num_envs", "2", "--data.init_args.num_steps", "8", "--data.init_args.total_env_steps", "32",
    "--model.init_args.hidden_sizes", "[16]", "--model.init_args.update_epochs", "1",
    "--model.init_args.num_minibatches", "1", "--trainer.enable_progress_bar", "false", "--trainer.logger", "false",
]  # fmt: skip
GAME = "open_spiel:connect_four"
OTHER = "TicTacToe"  # rl_lightning.envs.TicTacToe, the env of ppo_tictactoe.yaml


@pytest.fixture(scope="module")
def tictactoe_ckpt(tmp_path_factory) -> str:
    """``last.ckpt`` of a 128-step PPO run on tic-tac-toe against random."""
    root = tmp_path_factory.mktemp("tictactoe")
    args = ["fit", "--config", str(ROOT / "configs" / "ppo_tictactoe.yaml"), "--data.init_args.num_envs", "4",
            "--data.init_args.num_steps", "16", "--data.init_args.total_env_steps", "128",
            "--model.init_args.hidden_sizes", "[16]", "--trainer.enable_progress_bar", "false", "--trainer.callbacks",
            "[{class_path: rl_lightning.callbacks.RLCheckpoint, init_args: {every_n_updates: 1, save_last: true}}]",
            ]  # fmt: skip
    result = run_cli(args, root)
    assert result.returncode == 0, result.stderr[-3000:]
    return str(next(root.glob("runs/ppo_tictactoe/version_0/checkpoints/last.ckpt")))


def _places(ckpt: str) -> list[tuple[list[str], str]]:
    panel = ("{trainer: {callbacks: [{class_path: rl_lightning.callbacks.GameEvaluation, init_args: "
             f"{{every_n_updates: 1, opponents: ['{ckpt}'], num_games: 4, rating_games: 0}}}}]}}}}")  # fmt: skip
    return [
        (["--data.init_args.seats", f"{{0: self, 1: '{ckpt}'}}"], f"data.seats[1]={ckpt!r}: was trained on {OTHER}"),
        (["--data.init_args.league.bots", f"{{'{ckpt}': 0.5}}"], f"data.league.bots={ckpt!r}: was trained on {OTHER}"),
        (["--config", panel], f"GameEvaluation: opponents entry={ckpt!r}: was trained on {OTHER}"),
        (["--model.init_args.init_weights", ckpt], f"model.init_weights={ckpt!r}: was trained on {OTHER}"),
    ]


@pytest.mark.parametrize("place", ["seat", "league-bot", "panel-opponent", "init-weights"])
def test_a_checkpoint_of_another_game_is_one_line_naming_both_games(tmp_path, tictactoe_ckpt, place):
    args, expected = _places(tictactoe_ckpt)[["seat", "league-bot", "panel-opponent", "init-weights"].index(place)]
    before = snapshot(tmp_path)
    result = run_cli(["fit", "--config", str(ROOT / "configs" / "ppo_connect_four.yaml"), *args, *TINY], tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    line = error_line(result)
    assert expected in line
    assert f"{GAME} (obs_shape=(3, 6, 7))" in line
    assert snapshot(tmp_path) == before  # refused before any work: no run folder, no checkpoint


def test_a_match_and_a_panel_refuse_a_policy_of_another_game(tictactoe_ckpt):
    """In-process: ``play_match`` with a policy of the tic-tac-toe checkpoint in Connect Four, and the panel that
    ``GameEvaluation``'s setup (and ``rl-lightning test``) loads, each refuse it before the first move."""
    import torch

    from rl_lightning.algos import PPO
    from rl_lightning.envs.games import OpenSpielEnv
    from rl_lightning.envs.games.bots import RandomBot
    from rl_lightning.errors import ConfigError
    from rl_lightning.games import PolicyBot, play_match
    from rl_lightning.games.panel import resolve_panel

    env = OpenSpielEnv(GAME)
    policy = PolicyBot(PPO.load_from_checkpoint(tictactoe_ckpt, weights_only=False).eval())
    with pytest.raises(ConfigError, match=rf"seat 0 \(PolicyBot\): was trained on {OTHER} .* the match plays {GAME}"):
        play_match(env, policy, RandomBot(), 2)
    with pytest.raises(ConfigError, match=rf"opponents entry '.*last.ckpt': was trained on {OTHER} .* plays {GAME}"):
        resolve_panel([tictactoe_ckpt], env, None, True, torch.device("cpu"))
    # The same kind of policy trained on this game plays.
    own = PolicyBot(PPO(env.spec, hidden_sizes=(8,)).eval())
    assert play_match(env, own, RandomBot(), 2).tested.shape == (2, 2, 2)
