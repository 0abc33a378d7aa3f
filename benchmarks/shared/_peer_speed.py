"""Training wall time per 1M env steps, ours against Stable-Baselines3, in one run on one machine.

Ours: ``trainer.fit`` of a bundled config built by the CLI (``build_cli``), with the logger, the progress bar and the
config's evaluation and checkpoint callbacks removed, so only training is timed. SB3: ``benchmarks/peers/sb3_ppo.py
train`` in SB3's own virtual environment (``--peer-python``), which times ``model.learn`` with the rl-zoo settings.
Runs alternate (ours, SB3, ours, SB3, ...) so that a shared machine's load hits both alike; each side's cost is
linear in env steps after start-up, so a run of N env steps gives the rate per 1M.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from _common import build_cli
from lightning.pytorch.callbacks import Checkpoint

from rl_lightning.callbacks import Evaluation

PEER_SCRIPT = Path(__file__).resolve().parents[1] / "peers" / "sb3_ppo.py"


@dataclass
class SpeedRow:
    side: str
    env_steps: int
    seconds: float

    @property
    def per_million(self) -> float:
        return self.seconds / self.env_steps * 1e6


def ours(config: str, total_env_steps: int, seed: int = 0) -> SpeedRow:
    """``trainer.fit`` seconds of ``config`` for ``total_env_steps`` env steps, training only."""
    torch.set_num_threads(1)
    cli = build_cli(config, seed, ["--data.init_args.total_env_steps", str(total_env_steps)])
    cli.trainer.callbacks[:] = [c for c in cli.trainer.callbacks if not isinstance(c, (Evaluation, Checkpoint))]
    start = time.perf_counter()
    cli.trainer.fit(cli.model, cli.datamodule)
    return SpeedRow("rl_lightning", int(cli.datamodule.env_steps), time.perf_counter() - start)


def peer(peer_python: str, env: str, total_env_steps: int, seed: int = 0) -> SpeedRow:
    """SB3's ``learn`` seconds for ``total_env_steps`` env steps, in its own interpreter."""
    cmd = [peer_python, str(PEER_SCRIPT), "train", "--env", env, "--total-env-steps", str(total_env_steps)]
    out = subprocess.run([*cmd, "--seed", str(seed)], check=True, capture_output=True, text=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    return SpeedRow("sb3", int(row["env_steps"]), float(row["train_seconds"]))


def run_speed(config: str, peer_python: str, env: str, total_env_steps: int, repeats: int) -> list[SpeedRow]:
    rows = []
    for _ in range(repeats):
        rows.append(ours(config, total_env_steps))
        print(f"  ours  {rows[-1].env_steps:,} env steps in {rows[-1].seconds:.1f} s", flush=True)
        rows.append(peer(peer_python, env, total_env_steps))
        print(f"  sb3   {rows[-1].env_steps:,} env steps in {rows[-1].seconds:.1f} s", flush=True)
    return rows


def print_speed(rows: list[SpeedRow], config: str, target: float = 0.5) -> None:
    med = {side: statistics.median(r.per_million for r in rows if r.side == side) for side in ("rl_lightning", "sb3")}
    ratios = [a.per_million / b.per_million for a, b in zip(rows[::2], rows[1::2])]
    print(f"\n== Training wall time per 1M env steps, {config} vs SB3 (rl-zoo settings), interleaved ==")
    print(f"  rl_lightning  {med['rl_lightning'] / 60:6.1f} min   (median of {len(ratios)})")
    print(f"  SB3           {med['sb3'] / 60:6.1f} min")
    verdict = "PASS" if statistics.median(ratios) <= target else "MISS"
    pairs = ", ".join(f"{r:.3f}" for r in ratios)
    print(f"  ratio ours/SB3 {statistics.median(ratios):.3f} (pairs: {pairs}); target <= {target}: {verdict}")
