"""``benchmarks/games/games.py --sections bc``: behaviour cloning as PPO's starting point on Hearts (issue 21 item 6).

Records ``--bc-games`` games of HeartsHeuristic, runs ``rl-lightning fit --config bc_hearts.yaml`` on them, then two
``ppo_hearts.yaml`` runs side by side (same seed, budget and wall-clock limit ``--seconds``), one with
``--model.init_args.init_weights`` the BC checkpoint, one from scratch. Each checkpoint (every ``--ckpt-every`` env
steps) plays ``--eval-hands`` hands against three random seats through the evaluation panel's match driver (the same
duplicate deals for every checkpoint); prints points per hand against env steps and the first checkpoint at or
below ``--target`` points per hand.
    python benchmarks/games/games.py --sections bc --bc-games 300 --ppo-steps 204800 --seconds 900
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from rl_lightning import keys
from rl_lightning.envs.games import OpenSpielEnv
from rl_lightning.envs.games.bots import HeartsHeuristic, RandomBot

BC_SEED = 1  # bc_hearts.yaml's seed_everything: BCDataModule's held-out split under it was never trained on
FRAGMENT = """trainer:
  callbacks:
    - class_path: rl_lightning.callbacks.GameEvaluation
      init_args: {{every_n_env_steps: 1000000000, opponents: [random], num_games: 4, rating_games: 0}}
    - class_path: rl_lightning.callbacks.RLCheckpoint
      init_args: {{every_n_env_steps: {every}, save_last: true, save_top_k: -1}}
"""  # checkpoints every ``every`` env steps; the in-training panel off (the checkpoints are scored afterwards)


def _cli(args: list[str], cwd: Path, log: str) -> subprocess.Popen:
    """``rl-lightning ARGS`` as a background process; its output goes to ``cwd/log``."""
    with open(cwd / log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "rl_lightning.cli", *args], cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip


def _points_vs_random(module: Any, env: Any, hands: int, seed: int) -> tuple[float, float, float]:
    """``(points per hand, low, high)`` of ``module`` (greedy) in every seat in turn against three random seats."""
    from rl_lightning.games import PolicyBot, match_metrics, play_match

    module.eval()
    m = match_metrics(play_match(env, PolicyBot(module), RandomBot(), hands // 4, seed=seed, batch_size=64))
    return m["points_per_hand"], m["points_per_hand_low"], m["points_per_hand_high"]


def _bc_accuracy(module: Any, env: Any, records: Path) -> float:
    """The share of the held-out games' decisions where the policy's greedy choice is the bot's."""
    from rl_lightning.algos.bc import masked_cross_entropy
    from rl_lightning.data import BCDataModule

    datamodule = BCDataModule(env, str(records), seed=BC_SEED)
    datamodule.setup("fit")
    rows = datamodule.val_rows[list(range(len(datamodule.val_rows)))]
    with torch.no_grad():
        logits = module.actor(module.encoder(rows[keys.OBS]))
        return float(masked_cross_entropy(logits, rows[keys.ACTION_MASK], rows[keys.ACTION])[1])


def _train_bc(work: Path, records: Path, epochs: int, logs: list[str]) -> Path:
    start = time.perf_counter()
    bc = _cli(["fit", "--config", "bc_hearts.yaml", "--data.init_args.path", str(records), "--trainer.max_epochs",
               str(epochs), *logs], work, "bc.log")  # fmt: skip
    if bc.wait() != 0:
        raise SystemExit(f"BC fit failed: see {work / 'bc.log'}")
    ckpt = max((work / "runs" / "bc_hearts").glob("version_*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime)
    print(f"BC: {epochs} epochs in {time.perf_counter() - start:.0f} s -> {ckpt}")
    return ckpt


def run_bc(bc_games: int, bc_epochs: int, ppo_steps: int, ckpt_every: int, seconds: float, hands: int,
           target: float, workdir: str, seed: int) -> None:  # fmt: skip
    """Steps PPO self-play needs on Hearts to reach ``target`` points per hand against three random seats, started
    from BC weights and from scratch (two runs at once, same seed, budget and wall-clock limit)."""
    from rl_lightning.algos import PPO
    from rl_lightning.data.records import record_games

    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = OpenSpielEnv("open_spiel:hearts")
    records = work / f"records_{bc_games}"
    start = time.perf_counter()
    if not records.exists():
        record_games(env, HeartsHeuristic(), bc_games, records, seed=seed)
    print(f"recorded {bc_games} HeartsHeuristic games in {time.perf_counter() - start:.0f} s -> {records}")
    logs = ["--trainer.logger.init_args.save_dir", str(work / "runs"), "--trainer.enable_progress_bar", "false"]
    bc_ckpt = _train_bc(work, records, bc_epochs, logs)
    fragment = work / "bench_callbacks.yaml"
    fragment.write_text(FRAGMENT.format(every=ckpt_every))
    runs = {}
    for name, extra in (("from_bc", ["--model.init_args.init_weights", str(bc_ckpt)]), ("scratch", [])):
        runs[name] = _cli(["fit", "--config", "ppo_hearts.yaml", "--config", str(fragment), "--data.init_args."
                           "total_env_steps", str(ppo_steps), "--trainer.logger.init_args.name", f"ppo_{name}",
                           *logs, *extra], work, f"ppo_{name}.log")  # fmt: skip
    start = time.perf_counter()
    for name, process in runs.items():
        try:
            process.wait(timeout=max(1.0, seconds - (time.perf_counter() - start)))
        except subprocess.TimeoutExpired:  # the wall-clock limit: SIGTERM saves last.ckpt (FaultCheckpoint)
            process.terminate()
            process.wait()
        print(f"PPO {name}: exit {process.returncode} after {time.perf_counter() - start:.0f} s")
    bc_module = PPO(env.spec, hidden_sizes=(256, 256), init_weights=str(bc_ckpt))  # ppo_hearts.yaml's network
    print(f"Hearts, points per hand against three random seats ({hands} hands per point, duplicate deals; lower is "
          "better; random 6.5, HeartsHeuristic 3.7):")  # fmt: skip
    print(f"  BC policy alone: {_fmt(_points_vs_random(bc_module, env, hands, seed))}; held-out accuracy "
          f"{_bc_accuracy(bc_module, env, records):.3f}")  # fmt: skip
    for name in runs:
        _report_run(work / "runs" / f"ppo_{name}", env, hands, target, seed, name)


def _fmt(points: tuple[float, float, float]) -> str:
    return f"{points[0]:.2f} [{points[1]:.2f}, {points[2]:.2f}]"


def _report_run(root: Path, env: Any, hands: int, target: float, seed: int, name: str) -> None:
    """Every ``env_steps=N.ckpt`` of a run against three random seats; the first at or below ``target``."""
    from rl_lightning.algos import PPO

    ckpts = sorted(root.glob("version_*/checkpoints/env_steps=*.ckpt"), key=lambda p: float(p.stem.split("=")[1]))
    reached = None
    for ckpt in ckpts:
        module = PPO.load_from_checkpoint(str(ckpt), map_location="cpu", init_weights=None)
        points = _points_vs_random(module, env, hands, seed)
        steps = int(float(ckpt.stem.split("=")[1]))
        if reached is None and points[0] <= target:
            reached = steps
        print(f"  {name} at {steps:,} env steps: {_fmt(points)}")
    print(
        f"  {name}: first checkpoint at or below {target} points per hand: "
        f"{'not within the budget' if reached is None else f'{reached:,} env steps'}"
    )
