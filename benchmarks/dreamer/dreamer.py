"""DreamerV3 benchmark: gradient-step speed per size preset, replay-ratio pacing, CartPole sample efficiency.

    python benchmarks/dreamer/dreamer.py                                  # speed, ratio, cartpole (seeds 0,1,2)
    python benchmarks/dreamer/dreamer.py --sections speed --presets tiny,XS --speed-seconds 20
    python benchmarks/dreamer/dreamer.py --sections cartpole --seeds 0 --cartpole-steps 40000 --cartpole-minutes 30
    python benchmarks/dreamer/dreamer.py --sections peer --peer-python SHEEPRL_VENV/bin/python   # ours vs sheeprl 0.8.4
    python benchmarks/dreamer/dreamer.py --profile [--profile-config dreamer.yaml]   # where an update's time goes

Run single-threaded (``torch.set_num_threads(1)``, set here). Sections:

  speed     ``DreamerV3.update`` (one gradient step on a synthetic ``[T=64, B=16]`` replay batch shaped like the
            ``SequenceCollector`` rows, horizon 15, LaProp, plus the slow-critic EMA the trainer's
            ``SoftTargetUpdate`` applies) for the presets ``tiny``, ``XS``, ``S``, ``12M`` (``--presets``): 2 warm-up
            steps, then up to ``--speed-steps`` steps, stopping early once ``--speed-seconds`` have passed (at least
            one step is always timed). Reports steps/s, s/step and the agent's parameter count, on CPU and, if
            ``torch.cuda.is_available()``, on CUDA too (synchronised around the timing). Information only.
  peer      ours against sheeprl 0.8.4 (``--peer-python``: a venv with ``sheeprl==0.8.4``, ``torch==2.13.0``): the
            ``speed`` measurement of ``XS`` on CPU (2 warm-up, then ``--peer-steps`` timed steps) alternated with
            ``peers/sheeprl_dreamer.py`` (``algo=dreamer_v3_XS`` on CartPole-v1, 1 sync env, batch 16 × 64, H 15,
            one torch thread; its ``train`` timed per gradient step inside a real sheeprl run, 2 warm-up calls left
            out), ``--peer-repeats`` times each. Reports both rates, the ratio ours/sheeprl (median over the pairs)
            and PASS/MISS against the target >= 3x (issue 13); the row does not count towards OVERALL.
  ratio     short runs (size ``tiny``, horizon 3, batch 4 × 8, ``--ratio-steps`` env steps after a 1024-step
            prefill) at several ``replay_ratio`` values and actor window / ``commit_stride`` combinations. Counted
            from outside the scheduler: optimiser steps by a post-step hook on the optimiser, env steps by the
            transitions the collector returns. PASS if, for every combination, the optimiser steps equal the
            documented schedule ``pretrain + ⌊(env steps − start)·r⌋`` exactly (``start`` = first env step of the
            actor window that completes the ``learning_starts`` prefill). ``replay/ratio_actual`` (computed by the
            datamodule from its own counters) is shown for information only: it cannot catch a wrong start.
  cartpole  ``configs/dreamer.yaml`` unchanged except: logger, checkpointing, progress bar and the config's own
            callbacks are replaced by one evaluation (``--eval-episodes`` deterministic episodes every
            ``--eval-every`` env steps), the budget is ``--cartpole-steps`` (default: the config's
            ``total_env_steps``) and optionally ``--cartpole-minutes`` of wall time per seed. A run stops at the
            first evaluation with mean return >= 400. Training time = ``trainer.fit`` wall time minus evaluation
            time, up to the crossing. PASS if every seed reaches 400 within the budget (median env steps reported),
            and if every seed's counted optimiser steps equal the schedule above (same independent counts).
  catch     ``configs/dreamer_catch.yaml`` (16×16 pixels through the CNN encoder/decoder), evaluated every 1,000 env
            steps on 32 episodes; PASS per seed if the mean return reaches 0.8 within the config's budget
            (uniform-random play scores about −0.76, the optimum is 1). Not in the default sections.

The summary table has the columns check / measured / target / verdict and ends with ``OVERALL: PASS/FAIL`` (over the
PASS/FAIL rows; ``info`` rows do not count).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))  # benchmarks/shared: _common.py & co.
from _common import (  # first: it silences warnings and Lightning's INFO logging before they import
    REPO,
    RunResult,
    TargetEvaluation,
    fit_with,
    median_or_inf,
    overrides_to_args,
    print_summary,
)

# isort: split
import lightning.pytorch as pl
import torch
import yaml
from _profile import Part, profile_fit
from lightning.pytorch.core.optimizer import LightningOptimizer
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import DreamerV3
from rl_lightning.algos.base import RLModule
from rl_lightning.algos.dreamer.behavior import behaviour_targets, behaviour_terms, replay_value_terms
from rl_lightning.algos.dreamer.update_graphs import UpdateGraphs
from rl_lightning.algos.dreamer.world_model import WorldModel
from rl_lightning.callbacks import Evaluation, SoftTargetUpdate
from rl_lightning.data import DreamerDataModule
from rl_lightning.data.replay import ReplayRing
from rl_lightning.envs import CartPole
from rl_lightning.networks.rssm import RSSM
from rl_lightning.objectives.dreamer import ReturnNormalizer

CONFIG = "dreamer.yaml"
SPEED_T, SPEED_B, SPEED_HORIZON = 64, 16, 15
SPEED_PRESETS = ("tiny", "XS", "S", "M", "12M")
CARTPOLE_TARGET = 400.0  # default of --cartpole-target
CATCH_CONFIG = "dreamer_catch.yaml"
CATCH_TARGET = 0.8  # mean return over evaluation episodes: +1 catch, -1 miss; uniform-random play scores about -0.76


def _fmt(value: float | None, spec: str = ".1f", none: str = "-") -> str:
    return none if value is None or value != value else format(value, spec)


# ----------------------------------------------------------------------------------------------------------------
# speed: gradient steps/s of DreamerV3.update on synthetic replay batches
# ----------------------------------------------------------------------------------------------------------------
def synthetic_batch(T: int, B: int, obs_dim: int, num_actions: int, seed: int = 0) -> TensorDict:
    """A ``[T, B]`` batch with the ring's row keys (``SequenceCollector.tick``): CartPole-like episodes of ~30 rows."""
    gen = torch.Generator().manual_seed(seed)
    is_first = torch.rand(T, B, generator=gen) < 1 / 30
    is_first[0] = True
    # The row before an is_first row is a terminal row (action zeroed, as the collector stores it).
    terminated = torch.zeros(T, B, dtype=torch.bool)
    terminated[:-1] = is_first[1:]
    action = torch.randint(0, num_actions, (T, B), generator=gen)
    action[terminated] = 0
    reward = torch.where(is_first, torch.zeros(T, B), torch.ones(T, B))
    return TensorDict(
        {
            keys.OBS: torch.randn(T, B, obs_dim, generator=gen) * 0.5,
            keys.ACTION: action,
            keys.REWARD: reward,
            keys.IS_FIRST: is_first,
            keys.TERMINATED: terminated,
            keys.TRUNCATED: torch.zeros(T, B, dtype=torch.bool),
            keys.POLICY_VERSION: torch.zeros(T, B, dtype=torch.int64),
        },
        batch_size=[T, B],
    )


def time_preset(
    size: str,
    device: str,
    max_steps: int,
    seconds: float,
    warmup: int = 2,
    precision: str = "32-true",
    batch_size: int = SPEED_B,
    compile_update: bool = False,
) -> dict[str, Any]:
    """Warm up, then time ``DreamerV3.update`` (one gradient step per call) until ``max_steps`` or ``seconds``;
    ``precision="bf16-mixed"`` runs it under the bfloat16 autocast Lightning's ``bf16-mixed`` wraps it in. With
    ``compile_update`` the first warm-up step compiles (its seconds are reported as ``compile_s``)."""
    torch.manual_seed(0)
    spec = CartPole().spec
    model = DreamerV3(env_spec=spec, size=size, horizon=SPEED_HORIZON, compile_update=compile_update).to(device)
    model.train()
    optimizer = model.configure_optimizers()
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    batches = synthetic_batch(SPEED_T, batch_size, spec.obs_shape[0], spec.num_actions).unsqueeze(0).to(device)
    critic, slow = model.target_networks()[0]
    online, target = list(critic.parameters()), list(slow.parameters())

    low = precision == "bf16-mixed"

    def step() -> None:
        with torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=low):
            model.update(batches, optimizer)
        with torch.no_grad():
            torch._foreach_lerp_(target, online, model.hparams.tau)  # what SoftTargetUpdate does after each step

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    start = time.perf_counter()
    first_s = 0.0
    for index in range(warmup):
        step()
        if index == 0:
            sync()
            first_s = time.perf_counter() - start
    sync()
    warmup_s = time.perf_counter() - start
    steps = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    while steps < max_steps and (steps == 0 or time.perf_counter() - start < seconds):
        step()
        steps += 1
        if device.startswith("cuda") and steps % 5 == 0:
            sync()  # keep the wall-clock check honest under async launches
    sync()
    elapsed = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    return {
        "size": size,
        "device": device,
        "params": params,
        "trainable": trainable,
        "steps": steps,
        "seconds": elapsed,
        "rate": steps / elapsed,
        "warmup_s": warmup_s,
        "first_step_s": first_s,
        "cpu_seconds": cpu_seconds,
        "precision": precision,
        "batch": batch_size,
        "compile_update": compile_update,
    }


def run_speed(
    presets: list[str],
    max_steps: int,
    seconds: float,
    precision: str = "32-true",
    batch_sizes: tuple[int, ...] = (),
    compile_update: bool = False,
) -> list[dict[str, Any]]:
    """Every preset at batch ``SPEED_B``, then the first preset at each of ``batch_sizes`` (the batch scaling)."""
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    cases = [(size, SPEED_B) for size in presets] + [(presets[0], b) for b in batch_sizes if b != SPEED_B]
    results = []
    for device in devices:
        for size, batch in cases:
            r = time_preset(
                size, device, max_steps, seconds, precision=precision, batch_size=batch, compile_update=compile_update
            )
            results.append(r)
            print(
                f"  [speed {size} {device}] {r['steps']} steps in {r['seconds']:.1f}s: {r['rate']:.3f} steps/s, "
                f"{1 / r['rate']:.3f} s/step (first step {r['first_step_s']:.1f}s, warm-up {r['warmup_s']:.1f}s); "
                f"params {r['params']:,}",
                flush=True,
            )
    return results


def print_speed(results: list[dict[str, Any]]) -> None:
    print(
        f"\n== Speed: DreamerV3.update, one gradient step on [T={SPEED_T}, B] (CartPole rows), "
        f"horizon {SPEED_HORIZON}, LaProp, threads {torch.get_num_threads()}, precision {results[0]['precision']}, "
        f"compile_update {results[0]['compile_update']} =="
    )
    header = (
        f"{'size':<6} {'device':<6} {'B':>4} {'params':>12} {'trainable':>12} {'steps':>6} {'steps/s':>9} "
        f"{'s/step':>8} {'ms per B·T row':>15} {'1st step s':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['size']:<6} {r['device']:<6} {r['batch']:>4} {r['params']:>12,} {r['trainable']:>12,} "
            f"{r['steps']:>6} {r['rate']:>9.3f} {1 / r['rate']:>8.3f} "
            f"{1e3 / r['rate'] / (r['batch'] * SPEED_T):>15.3f} {r['first_step_s']:>10.1f}"
        )


# ----------------------------------------------------------------------------------------------------------------
# peer: our XS gradient step against sheeprl 0.8.4's dreamer_v3_XS, interleaved in one run
# ----------------------------------------------------------------------------------------------------------------
PEER_SCRIPT = Path(__file__).resolve().parents[1] / "peers" / "sheeprl_dreamer.py"
PEER_PRESET = "XS"
PEER_TARGET = 3.0  # issue 13: ours >= 3x sheeprl's gradient steps/s
PEER_WARMUP = 2


def peer_ours(steps: int, precision: str, compile_update: bool = False) -> dict[str, Any]:
    """The ``speed`` measurement of ``XS`` on CPU (1 thread): ``steps`` timed gradient steps after the warm-up."""
    torch.set_num_threads(1)
    r = time_preset(
        PEER_PRESET, "cpu", steps, math.inf, warmup=PEER_WARMUP, precision=precision, compile_update=compile_update
    )
    return {
        "side": "ours", "precision": precision, "steps": r["steps"], "seconds": r["seconds"],
        "cpu_seconds": r["cpu_seconds"], "rate": r["rate"], "trainable": r["trainable"],
        "threads": torch.get_num_threads(), "compile_update": compile_update, "first_step_s": r["first_step_s"],
    }  # fmt: skip


def peer_sheeprl(peer_python: str, steps: int, precision: str) -> dict[str, Any]:
    """``peers/sheeprl_dreamer.py`` in sheeprl's venv: its ``train`` calls timed inside a real sheeprl run."""
    cmd = [peer_python, str(PEER_SCRIPT), "--steps", str(steps), "--warmup", str(PEER_WARMUP)]
    cmd += ["--precision", precision]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # sheeprl's venv must not import our checkout's packages
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"side": "sheeprl", "precision": precision, "steps": row["gradient_steps"], "seconds": row["train_seconds"],
            "cpu_seconds": row["train_cpu_seconds"], "rate": row["steps_per_second"],
            "trainable": row["trainable_params"], "threads": row["threads"], "version": row["sheeprl"],
            "torch": row["torch"], "run_seconds": row["run_seconds"]}  # fmt: skip


def run_peer(
    peer_python: str, repeats: int, steps: int, precision: str = "32-true", compile_update: bool = False
) -> list[dict[str, Any]]:
    """Ours, sheeprl, ours, sheeprl, ...: a shared machine's load hits both sides alike. Both sides run at
    ``precision`` (``32-true`` or ``bf16-mixed``: Lightning's and Fabric's names for the same autocast)."""
    rows = []
    for i in range(repeats):
        for side in ("ours", "sheeprl"):
            if side == "ours":
                r = peer_ours(steps, precision, compile_update)
            else:
                r = peer_sheeprl(peer_python, steps, precision)
            r["repeat"] = i
            rows.append(r)
            print(
                f"  [peer {side:<7} {precision} #{i}] {r['steps']} gradient steps in {r['seconds']:.1f}s "
                f"({r['cpu_seconds']:.1f} CPU-s): {r['rate']:.3f} steps/s, {1 / r['rate']:.2f} s/step",
                flush=True,
            )
    return rows


def _peer_medians(rows: list[dict[str, Any]]) -> tuple[float, float, list[float]]:
    ours = [r for r in rows if r["side"] == "ours"]
    peer = [r for r in rows if r["side"] == "sheeprl"]
    ratios = [a["rate"] / b["rate"] for a, b in zip(ours, peer)]
    return statistics.median(r["rate"] for r in ours), statistics.median(r["rate"] for r in peer), ratios


def print_peer(rows: list[dict[str, Any]]) -> None:
    ours_rate, peer_rate, ratios = _peer_medians(rows)
    ours = next(r for r in rows if r["side"] == "ours")
    peer = next(r for r in rows if r["side"] == "sheeprl")
    print(
        f"\n== Peer: gradient steps/s, ours {PEER_PRESET} vs sheeprl {peer['version']} dreamer_v3_XS (torch "
        f"{peer['torch']}), CPU, [T={SPEED_T}, B={SPEED_B}], horizon {SPEED_HORIZON}, precision "
        f"{peer['precision']} on both sides, interleaved; ours compile_update {ours['compile_update']} =="
    )
    header = f"{'side':<8} {'run':>3} {'threads':>7} {'steps':>5} {'secs':>7} {'CPU-s':>7} {'steps/s':>8} {'s/step':>7}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['side']:<8} {r['repeat']:>3} {r['threads']:>7} {r['steps']:>5} {r['seconds']:>7.1f} "
            f"{r['cpu_seconds']:>7.1f} {r['rate']:>8.3f} {1 / r['rate']:>7.2f}"
        )
    cpu_ratio = statistics.median(
        (b["cpu_seconds"] / b["steps"]) / (a["cpu_seconds"] / a["steps"])
        for a, b in zip([r for r in rows if r["side"] == "ours"], [r for r in rows if r["side"] == "sheeprl"])
    )
    verdict = "PASS" if statistics.median(ratios) >= PEER_TARGET else "MISS"
    print(f"  ours     {ours_rate:.3f} gradient steps/s (median of {len(ratios)})")
    print(f"  sheeprl  {peer_rate:.3f} gradient steps/s")
    print(
        f"  ratio ours/sheeprl {statistics.median(ratios):.2f} (pairs: {', '.join(f'{x:.2f}' for x in ratios)}; "
        f"per CPU-s {cpu_ratio:.2f}); target >= {PEER_TARGET:g}: {verdict}"
    )
    print(
        f"  same sizes, different recipes: trainable parameters ours {ours['trainable']:,} vs sheeprl "
        f"{peer['trainable']:,}. Both: deter 256, units 256, 1-layer MLPs and heads, 32x32 latents, 255 bins, SiLU.\n"
        "  Ours (the speed section's DreamerV3(size='XS'), 2024 defaults): RMSNorm, the 2024 GRU cell (separate\n"
        "  deter/stoch/action input layers + one hidden layer), 2-layer prior head, replay-value loss (repval 0.3),\n"
        "  one LaProp optimiser with AGC. sheeprl: LayerNorm GRU (v1), 1-layer prior, three fused Adams (global-norm\n"
        "  clips). Timed: ours DreamerV3.update + slow-critic EMA on one fixed synthetic batch; sheeprl its train()\n"
        "  per gradient step inside a real CartPole run (fresh replay batches, its EMA before train() not timed)."
    )


# ----------------------------------------------------------------------------------------------------------------
# ratio: achieved vs requested replay ratio on short runs (no learning needed)
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RatioCase:
    replay_ratio: float
    num_envs: int
    rollout_length: int
    commit_stride: int

    @property
    def name(self) -> str:
        return f"r={self.replay_ratio:g} E={self.num_envs} window={self.rollout_length} stride={self.commit_stride}"


RATIO_CASES = (
    RatioCase(0.0625, 4, 16, 8),
    RatioCase(0.25, 4, 16, 8),
    RatioCase(1.0, 4, 16, 8),
    RatioCase(0.125, 3, 10, 4),  # 3.75 gradient steps per window: the fraction is carried
    RatioCase(0.0625, 4, 1, 1),  # one tick per window, a gradient step every 4 windows
)
RATIO_PREFILL = 1024


class IndependentCounts(pl.Callback):
    """Counts, from outside the ``Ratio`` scheduler, what the replay ratio is about.

    Optimiser steps: a post-step hook on every torch optimiser of the run (fires on each real ``step()``). Env steps:
    the transitions each ``collector.rollout`` call returns. Neither reads a counter the scheduler moves.
    """

    def __init__(self) -> None:
        self.optimizer_steps = 0
        self.env_steps = 0
        self.datamodule: Any = None

    def _count_step(self, *_: Any) -> None:
        self.optimizer_steps += 1

    def on_train_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self.datamodule = trainer.datamodule
        for optimizer in trainer.optimizers:
            optimizer.register_step_post_hook(self._count_step)
        collector = trainer.datamodule.collector
        rollout = collector.rollout

        def counted_rollout(*args: Any, **kwargs: Any) -> Any:
            out = rollout(*args, **kwargs)
            self.env_steps += out.numel()
            return out

        collector.rollout = counted_rollout


def ratio_start(learning_starts: int, window: int) -> int:
    """First env step of the actor window whose end reaches ``learning_starts`` (where the ratio starts counting)."""
    return (max(-(-learning_starts // window), 1) - 1) * window


def expected_gradient_steps(env_steps: int, learning_starts: int, window: int, ratio: float, pretrain: int) -> int:
    """The documented schedule, from the config alone (``DreamerDataModule``/``Ratio`` docstrings, sheeprl's rule).

    The ratio counts from the start of the actor window (``window`` = num_envs × rollout_length env steps) that
    completes the ``learning_starts`` prefill, so a run of ``env_steps`` owes
    ``pretrain + ⌊(env_steps − start)·ratio⌋`` gradient steps with ``start = (max(⌈learning_starts / window⌉, 1) − 1)
    · window``. ``ratio`` is read as a decimal (``Fraction(str(ratio))``) so the floor is exact.
    """
    start = ratio_start(learning_starts, window)
    if env_steps <= start:
        return 0
    return pretrain + math.floor((env_steps - start) * Fraction(str(ratio)))


def ratio_datamodule_stats(dm: DreamerDataModule, counts: IndependentCounts) -> dict[str, Any]:
    """Independent counts against the documented schedule, plus the scheduler's own ``replay/ratio_actual``."""
    window = dm.num_envs * dm.rollout_length
    expected = expected_gradient_steps(counts.env_steps, dm.learning_starts, window, dm.replay_ratio, dm.pretrain_steps)
    start = ratio_start(dm.learning_starts, window)
    trained = dm.local_env_steps - dm.train_start if dm.train_start is not None else 0
    return {
        "optimizer_steps": counts.optimizer_steps,
        "start": start,
        "actual": counts.optimizer_steps / max(counts.env_steps - start, 1),  # from the independent counts
        "expected": expected,
        "env_steps": counts.env_steps,
        "window": window,
        "learning_starts": dm.learning_starts,
        "reported": dm.local_gradient_steps / max(trained, 1),  # what replay/ratio_actual logs (information)
        "requested": float(dm.replay_ratio),
    }


def run_ratio_case(case: RatioCase, env_steps: int, seed: int = 0) -> dict[str, Any]:
    torch.set_num_threads(1)
    pl.seed_everything(seed, verbose=False)
    dm = DreamerDataModule(
        CartPole(),
        num_envs=case.num_envs,
        rollout_length=case.rollout_length,
        total_env_steps=RATIO_PREFILL + env_steps,
        buffer_size=4096,
        batch_size=4,
        sequence_length=8,
        replay_ratio=case.replay_ratio,
        learning_starts=RATIO_PREFILL,
        commit_stride=case.commit_stride,
        engine="cpu",
        seed=seed,
        device="cpu",
    )
    model = DreamerV3(env_spec=dm.env_spec, size="tiny", horizon=3, bins=15, warmup_steps=0, lr=1e-3)
    counts = IndependentCounts()
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=-1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, callbacks=[counts],
    )  # fmt: skip
    start = time.perf_counter()
    trainer.fit(model, dm)
    stats = ratio_datamodule_stats(dm, counts)
    stats.update(case=case, seconds=time.perf_counter() - start, updates=model.updates)
    return stats


def _ratio_ok(stats: dict[str, Any]) -> bool:
    return stats["optimizer_steps"] == stats["expected"]


def print_ratio(results: list[dict[str, Any]]) -> None:
    print(
        "\n== Replay ratio: optimiser steps (counted by an optimiser hook) vs the documented schedule "
        f"pretrain + floor((env steps counted at the collector - start) · r); tiny, horizon 3, batch 4 × 8, "
        f"learning_starts {RATIO_PREFILL} =="
    )
    header = (
        f"{'case':<40} {'env_st':>7} {'start':>6} {'opt_st':>7} {'expected':>8} {'achieved':>8} {'requested':>9} "
        f"{'logged':>8} {'secs':>6}"
    )
    print(header)
    print("-" * len(header))
    for s in results:
        print(
            f"{s['case'].name:<40} {s['env_steps']:>7} {s['start']:>6} {s['optimizer_steps']:>7} {s['expected']:>8} "
            f"{s['actual']:>8.4f} {s['requested']:>9.4f} {s['reported']:>8.4f} {s['seconds']:>6.1f}"
        )
    print("  (start = first env step of the actor window that completes the prefill; logged = replay/ratio_actual)")


# ----------------------------------------------------------------------------------------------------------------
# cartpole: env steps and training time to eval return >= 400 on configs/dreamer.yaml
# ----------------------------------------------------------------------------------------------------------------
class DreamerEvaluation(TargetEvaluation):
    """``TargetEvaluation`` that also keeps the datamodule (for the replay ratio) and stops at a wall-time cap."""

    def __init__(self, max_seconds: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_seconds = max_seconds
        self.datamodule: Any = None
        self.counts = IndependentCounts()
        self.timed_out = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        super().on_train_start(trainer, pl_module)
        self.datamodule = trainer.datamodule
        self.counts.on_train_start(trainer, pl_module)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        capped = self.crossed is None and self.max_seconds is not None and self.fit_start is not None
        if capped and time.perf_counter() - self.fit_start >= self.max_seconds:
            self.timed_out = True
            trainer.should_stop = True


def config_data(config: str = CONFIG) -> dict[str, Any]:
    with open(REPO / "configs" / config) as f:
        return yaml.safe_load(f)["data"]["init_args"]


def run_cartpole_seed(
    seed: int,
    budget: int,
    eval_every: int,
    episodes: int,
    minutes: float | None,
    overrides: list[str],
    target: float = CARTPOLE_TARGET,
    config: str = CONFIG,
) -> tuple[RunResult, dict[str, Any], bool]:
    callback = DreamerEvaluation(
        max_seconds=None if minutes is None else 60.0 * minutes,
        metric="return",
        target=target,
        every_n_env_steps=eval_every,
        num_episodes=episodes,
        deterministic=None,  # DreamerV3's default: the policy's (and latents') mode
    )
    extra = ["--data.init_args.total_env_steps", str(budget), *overrides]
    result = fit_with(config, seed, callback, extra)
    return result, ratio_datamodule_stats(callback.datamodule, callback.counts), callback.timed_out


def print_cartpole(runs: list[tuple[RunResult, dict[str, Any], bool]], verbose: bool, target: float) -> None:
    print(
        f"\n== CartPole: configs/{CONFIG}, first eval with mean return >= {target:g} "
        "(train_s = fit_s - eval_s, up to the crossing) =="
    )
    header = (
        f"{'seed':>4} {'crossed':>7} {'env_steps':>10} {'train_s':>8} {'eval_s':>7} {'fit_s':>7} {'best':>7} "
        f"{'last':>7} {'grad_st':>8} {'ratio':>7} {'req':>7} {'stop':>8}"
    )
    print(header)
    print("-" * len(header))
    for r, ratio, timed_out in runs:
        steps = f"{r.env_steps}" if r.crossed else f">{r.total_env_steps}"
        cross_s = cartpole_train_seconds(r)
        train_s = r.train_seconds if cross_s is None else cross_s
        stop = "target" if r.crossed else ("time" if timed_out else "budget")
        print(
            f"{r.seed:>4} {'yes' if r.crossed else 'NO':>7} {steps:>10} {train_s:>8.1f} {r.eval_seconds:>7.1f} "
            f"{r.fit_seconds:>7.1f} {_fmt(r.best_score):>7} {_fmt(r.final_score):>7} {ratio['optimizer_steps']:>8} "
            f"{ratio['actual']:>7.4f} {ratio['requested']:>7.4f} {stop:>8}"
        )
        if verbose:
            curve = " ".join(f"{int(h['env_steps'])}:{h['eval/episode_return']:.0f}" for h in r.history)
            print(f"       curve {curve}")


def cartpole_train_seconds(r: RunResult) -> float | None:
    """Training seconds (fit wall time minus evaluation) up to the crossing; ``None`` if the run never crossed."""
    for h in r.history:
        if "train_seconds_at_cross" in h:
            return h["train_seconds_at_cross"]
    return None


# ----------------------------------------------------------------------------------------------------------------
def summarise(
    speed: list[dict[str, Any]] | None,
    ratio: list[dict[str, Any]] | None,
    cartpole: list[tuple[RunResult, dict[str, Any], bool]] | None,
    budget: int,
    target: float = CARTPOLE_TARGET,
    catch: list[tuple[RunResult, dict[str, Any], bool]] | None = None,
    peer: list[dict[str, Any]] | None = None,
) -> bool | None:
    rows: list[tuple[str, str, str, str]] = []
    verdicts: list[bool] = []

    def verdict(ok: bool) -> str:
        verdicts.append(ok)
        return "PASS" if ok else "FAIL"

    for r in speed or []:
        rows.append((
            f"Speed {r['size']} B={r['batch']} ({r['params'] / 1e6:.2f}M params) on {r['device']}: grad steps/s",
            f"{r['rate']:.3f} steps/s = {1 / r['rate']:.3f} s/step ({r['steps']} steps)",
            "-",
            "info",
        ))  # fmt: skip
    if peer:
        ours_rate, peer_rate, ratios = _peer_medians(peer)
        rows.append((
            f"Peer: ours {PEER_PRESET} / sheeprl dreamer_v3_XS gradient steps/s (CPU, 1 thread, 64x16, H 15)",
            f"{statistics.median(ratios):.2f}x ({ours_rate:.3f} vs {peer_rate:.3f} steps/s, median of {len(ratios)})",
            f">= {PEER_TARGET:g}x",
            "PASS" if statistics.median(ratios) >= PEER_TARGET else "MISS",
        ))  # fmt: skip
    for s in ratio or []:
        rows.append((
            f"Ratio {s['case'].name}: optimiser steps",
            f"{s['optimizer_steps']} (achieved {s['actual']:.4f} vs {s['requested']:g}, {s['env_steps']} env steps)",
            f"== {s['expected']} = floor(({s['env_steps']} - {s['start']}) · {s['requested']:g})",
            verdict(_ratio_ok(s)),
        ))  # fmt: skip
    if cartpole:
        results = [r for r, _, _ in cartpole]
        med = median_or_inf([r.env_steps for r in results])
        per_seed = ", ".join(
            str(r.env_steps) if r.crossed else f">{r.total_env_steps} (best {_fmt(r.best_score)})" for r in results
        )
        n_crossed = sum(r.crossed for r in results)
        med_txt = f"{med:.0f}" if med != float("inf") else "never"
        rows.append((
            f"CartPole env steps to eval {target:g}",
            f"{n_crossed}/{len(results)} seeds, median {med_txt} ({per_seed})",
            f"every seed within {budget} env steps",
            verdict(n_crossed == len(results)),
        ))  # fmt: skip
        trains = [cartpole_train_seconds(r) for r in results]
        crossed_trains = [t for t in trains if t is not None]
        rows.append((
            f"CartPole train s to {target:g} (fit - eval)",
            f"median {_fmt(statistics.median(crossed_trains) if crossed_trains else None, '.0f')} "
            f"({', '.join(_fmt(t, '.0f') for t in trains)})",
            "-",
            "info",
        ))  # fmt: skip
        ratios = [ratio for _, ratio, _ in cartpole]
        rows.append((
            "CartPole optimiser steps vs the replay_ratio schedule",
            ", ".join(f"{s['optimizer_steps']}/{s['expected']}" for s in ratios) + " (counted/expected)",
            "every seed counted == pretrain + floor((env steps - start) · r)",
            verdict(all(_ratio_ok(s) for s in ratios)),
        ))  # fmt: skip
    for r, stats, _ in catch or []:
        rows.append((
            f"Catch (16x16 pixels, CNN) seed {r.seed}: env steps to eval {CATCH_TARGET:g}",
            f"{r.env_steps if r.crossed else f'>{r.total_env_steps}'} (best {_fmt(r.best_score, '.2f')}, "
            f"ratio {stats['actual']:.4f})",
            f"within {r.total_env_steps} env steps",
            verdict(r.crossed),
        ))  # fmt: skip
    return print_summary(rows, verdicts)


def _csv(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


# Profile: where a DreamerV3 fit's time goes (one update = the gradient steps due after one collection window)
PROFILE_PARTS = [
    Part("collection and replay (DreamerDataModule.collect)", [DreamerDataModule.collect]),
    Part("sampling sequences", [ReplayRing.sample_sequences], 1),
    Part("update (DreamerV3.update)", [DreamerV3.update]),
    Part("world model: observe + losses", [WorldModel.embed, RSSM.obs_core, WorldModel.loss_terms], 1),
    Part("imagination", [UpdateGraphs._imagine], 1),
    Part(
        "actor and critic losses",
        [behaviour_targets, ReturnNormalizer.update, behaviour_terms, replay_value_terms],
        1,
    ),
    Part("backward", [RLModule.backward_loss], 1),
    Part("gradient clip", [torch.nn.utils.clip_grad_norm_], 1),
    Part("optimiser step", [LightningOptimizer.step], 1),
    Part("target networks (soft update)", [SoftTargetUpdate.update]),
    Part("logging", [DreamerV3._log_update]),
    Part("evaluation callback", [Evaluation.evaluate]),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sections", default="speed,ratio,cartpole", help="comma list of speed,ratio,cartpole,catch,peer"
    )
    parser.add_argument("--seeds", default="0,1,2", help="comma list of CartPole seeds (default 0,1,2)")
    parser.add_argument("--presets", default=",".join(SPEED_PRESETS), help="comma list of size presets for speed")
    parser.add_argument(
        "--batch-sizes", default="", help="speed: also time the first preset at these batch sizes, e.g. 4,8,32,64"
    )
    parser.add_argument("--speed-steps", type=int, default=20, help="most timed gradient steps per preset")
    parser.add_argument("--speed-seconds", type=float, default=60.0, help="time box per preset (after warm-up)")
    parser.add_argument("--peer-python", default=None, help="python of a venv with sheeprl==0.8.4 (section peer)")
    parser.add_argument("--peer-repeats", type=int, default=2, help="peer: runs of each side, interleaved")
    parser.add_argument("--peer-steps", type=int, default=20, help="peer: timed gradient steps per run and side")
    parser.add_argument(
        "--precision", default="32-true", choices=("32-true", "bf16-mixed"),
        help="speed and peer: float32, or the bfloat16 autocast of trainer.precision bf16-mixed (both peer sides)",
    )  # fmt: skip
    parser.add_argument(
        "--compile-update", action="store_true", help="speed and peer: ours with model.compile_update=true"
    )
    parser.add_argument("--ratio-steps", type=int, default=3072, help="env steps after the prefill per ratio run")
    parser.add_argument(
        "--cartpole-steps", type=int, default=None, help="env-step budget per seed (default: the config's)"
    )
    parser.add_argument("--cartpole-minutes", type=float, default=None, help="wall-time cap per seed (default none)")
    parser.add_argument(
        "--cartpole-target", type=float, default=CARTPOLE_TARGET, help="mean eval return that ends a run (400)"
    )
    parser.add_argument("--eval-every", type=int, default=2_500, help="env steps between CartPole evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10, help="episodes per CartPole evaluation")
    parser.add_argument("--verbose", action="store_true", help="print every CartPole learning curve")
    parser.add_argument("--profile", action="store_true", help="only print the cProfile breakdown of a short fit")
    parser.add_argument("--profile-config", default="dreamer.yaml", help="bundled config to profile")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra CLI setting for every CartPole/Catch run (tuning), e.g. --override model.init_args.lr=1e-4",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.profile:
        profile_fit(args.profile_config, PROFILE_PARTS, updates=10, extra=overrides_to_args(args.override))
        return
    sections = set(_csv(args.sections))
    unknown = sections - {"speed", "ratio", "cartpole", "catch", "peer"}
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)}; choose from speed,ratio,cartpole,catch,peer")
    if "peer" in sections and args.peer_python is None:
        parser.error("--sections peer needs --peer-python (a venv with sheeprl==0.8.4 and torch==2.13.0)")
    presets = _csv(args.presets)
    seeds = [int(s) for s in _csv(args.seeds)]
    budget = args.cartpole_steps if args.cartpole_steps is not None else int(config_data()["total_env_steps"])
    print(
        f"rl_lightning DreamerV3 benchmark: torch {torch.__version__}, lightning {pl.__version__}, "
        f"threads {torch.get_num_threads()}, cpus {os.cpu_count()}, cuda {torch.cuda.is_available()}"
    )
    if args.override:
        print(f"  overrides: {' '.join(args.override)}")

    batch_sizes = tuple(int(b) for b in _csv(args.batch_sizes))
    speed = (
        run_speed(presets, args.speed_steps, args.speed_seconds, args.precision, batch_sizes, args.compile_update)
        if "speed" in sections
        else None
    )
    peer = (
        run_peer(args.peer_python, args.peer_repeats, args.peer_steps, args.precision, args.compile_update)
        if "peer" in sections
        else None
    )
    ratio = None
    if "ratio" in sections:
        ratio = []
        for case in RATIO_CASES:
            s = run_ratio_case(case, args.ratio_steps)
            ratio.append(s)
            print(f"  [ratio {case.name}] actual {s['actual']:.4f} ({s['seconds']:.1f}s)", flush=True)
    cartpole = None
    if "cartpole" in sections:
        cartpole = []
        overrides = overrides_to_args(args.override)
        for seed in seeds:
            r, rs, timed_out = run_cartpole_seed(
                seed,
                budget,
                args.eval_every,
                args.eval_episodes,
                args.cartpole_minutes,
                overrides,
                args.cartpole_target,
            )
            cartpole.append((r, rs, timed_out))
            print(
                f"  [CartPole seed {seed}] crossed={r.crossed} env_steps={r.env_steps} total={r.total_env_steps} "
                f"train={r.train_seconds:.1f}s eval={r.eval_seconds:.1f}s best={_fmt(r.best_score)} "
                f"ratio={rs['actual']:.4f}/{rs['requested']:g}{' (time cap)' if timed_out else ''}",
                flush=True,
            )

    catch = None
    overrides = overrides_to_args(args.override)
    if "catch" in sections:
        catch = []
        catch_budget = int(config_data(CATCH_CONFIG)["total_env_steps"])
        for seed in seeds:
            r, rs, timed_out = run_cartpole_seed(
                seed, catch_budget, 1_000, 32, args.cartpole_minutes, overrides, CATCH_TARGET, CATCH_CONFIG
            )
            catch.append((r, rs, timed_out))
            print(
                f"  [Catch seed {seed}] crossed={r.crossed} env_steps={r.env_steps} train={r.train_seconds:.1f}s "
                f"best={_fmt(r.best_score, '.2f')} ratio={rs['actual']:.4f}/{rs['requested']:g}",
                flush=True,
            )

    if speed is not None:
        print_speed(speed)
    if peer is not None:
        print_peer(peer)
    if ratio is not None:
        print_ratio(ratio)
    if cartpole is not None:
        print_cartpole(cartpole, args.verbose, args.cartpole_target)
    overall = summarise(speed, ratio, cartpole, budget, args.cartpole_target, catch, peer)
    if overall is not None:
        print(f"\nOVERALL: {'PASS' if overall else 'FAIL'}")


if __name__ == "__main__":
    main()
