"""``benchmarks/games/games.py --sections mcts``: a Connect Four PPO policy against OpenSpiel's ``MCTSBot`` (issue 21).

Trains ``configs/ppo_connect_four.yaml`` as shipped for ``--mcts-train-minutes`` of wall clock (``--trainer.max_time``)
unless ``--mcts-ckpt`` names a checkpoint, then plays its policy, greedy (its ``GameEvaluation`` form) and sampling,
against ``OpenSpielMCTSBot`` (random rollouts, ``--mcts-simulations`` simulations, uct_c 2, MCTS-Solver backups) and
against uniformly random play, ``--mcts-games`` games each with seats alternated (half the games in each seat,
through the evaluation match driver). For reference, MCTS against random and the bundled ConnectFourHeuristic against
MCTS. Win / draw / loss, the win rate with its 95% Wilson interval and the sign test of wins against losses
(``rl_lightning.games.match_metrics``).
    python benchmarks/games/games.py --sections mcts --mcts-ckpt PATH/last.ckpt --mcts-games 200 --mcts-simulations 100
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from rl_lightning.envs.games import OpenSpielEnv
from rl_lightning.envs.games.bots import ConnectFourHeuristic, OpenSpielMCTSBot, RandomBot
from rl_lightning.games import PolicyBot, match_metrics, play_match


def _train(minutes: int, workdir: Path) -> str:
    """``rl-lightning fit --config ppo_connect_four.yaml`` stopped after ``minutes``; the path of its last.ckpt."""
    root = Path(__file__).resolve().parents[2]
    args = ["fit", "--config", str(root / "configs" / "ppo_connect_four.yaml"),
            "--trainer.max_time", f"00:00:{minutes:02d}:00", "--trainer.logger.init_args.save_dir",
            str(workdir / "runs"), "--trainer.logger.init_args.version", "mcts_bench",
            "--trainer.enable_progress_bar", "false"]  # fmt: skip
    start = time.perf_counter()
    with open(workdir / "ppo.log", "w") as log:
        code = subprocess.run([sys.executable, "-m", "rl_lightning.cli", *args], cwd=workdir, stdout=log,
                              stderr=subprocess.STDOUT, check=False).returncode  # fmt: skip
    if code != 0:
        raise SystemExit(f"ppo training failed; see {workdir / 'ppo.log'}")
    print(f"trained for {time.perf_counter() - start:.0f} s: rl-lightning {' '.join(args)}")
    return str(workdir / "runs" / "ppo_connect_four" / "mcts_bench" / "checkpoints" / "last.ckpt")


def _line(tested: str, opponent: str, metrics: dict[str, float], seconds: float) -> str:
    games = int(metrics["games"])
    wins, draws = round(metrics["win_rate"] * games), round(metrics["draw_rate"] * games)
    return (f"| {tested} | {opponent} | {metrics['win_rate']:.3f} [{metrics['win_rate_low']:.3f}, "
            f"{metrics['win_rate_high']:.3f}] | {wins} / {draws} / {games - wins - draws} | "
            f"{metrics['p_value_win_rate']:.1g} | {seconds:.0f} |")  # fmt: skip


def run_mcts(ckpt: str, games: int, simulations: int, train_minutes: int, workdir: str, seed: int) -> None:
    """The section: the table of the module docstring, one line per match."""
    from rl_lightning.games.panel import _load_module

    if not ckpt:
        work = Path(workdir).resolve()
        work.mkdir(parents=True, exist_ok=True)
        ckpt = _train(train_minutes, work)
    module = _load_module(ckpt, torch.device("cpu"))
    env = OpenSpielEnv("open_spiel:connect_four")
    mcts = OpenSpielMCTSBot(simulations=simulations, seed=seed)
    players: dict[str, Any] = {"PPO greedy": PolicyBot(module, deterministic=True, seed=seed),
                               "PPO sampling": PolicyBot(module, deterministic=False, seed=seed),
                               f"MCTS {simulations}": mcts, "ConnectFourHeuristic": ConnectFourHeuristic(),
                               "random": RandomBot()}  # fmt: skip
    matches = [("PPO greedy", f"MCTS {simulations}"), ("PPO sampling", f"MCTS {simulations}"),
               ("PPO greedy", "random"), ("PPO sampling", "random"), (f"MCTS {simulations}", "random"),
               ("ConnectFourHeuristic", f"MCTS {simulations}")]  # fmt: skip
    print(f"checkpoint {ckpt}: {games} games per line, seats alternated")
    print("| tested | opponent | win rate [95% Wilson] | W / D / L | sign-test p | wall s |")
    print("|---|---|---|---|---|---|")
    for number, (tested, opponent) in enumerate(matches):
        start = time.perf_counter()
        result = play_match(env, players[tested], players[opponent], games // 2, seed=seed + number,
                            duplicate=False, baseline=False)  # fmt: skip
        print(_line(tested, opponent, match_metrics(result), time.perf_counter() - start), flush=True)
