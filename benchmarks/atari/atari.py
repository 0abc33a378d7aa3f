"""Atari benchmark: Breakout throughput per backend against SB3, PPO Breakout's learning curve, DreamerV3 on Atari
(replay bytes per transition, gradient steps/s, world-model loss), and memory. Needs the ``[atari,envpool]`` extras.

    python benchmarks/atari/atari.py --sections throughput --peer-python SB3_VENV/bin/python
    python benchmarks/atari/atari.py --sections learning --out /tmp/breakout      # PPO, 1M agent steps (about an hour)
    python benchmarks/atari/atari.py --read /tmp/breakout/ppo_atari/version_0     # tables of a finished run
    python benchmarks/atari/atari.py --sections dreamer --presets XS,S --dreamer-updates 30
    python benchmarks/atari/atari.py --sections memory

Ours run the bundled configs (``configs/ppo_atari.yaml``, ``configs/dreamer_atari.yaml``) built by the CLI;
SB3 runs ``benchmarks/peers/sb3_ppo.py`` in its own virtual environment (rl-zoo Atari settings: ``AtariWrapper``,
``SubprocVecEnv`` of 8 envs, 4 stacked frames, ``CnnPolicy``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))  # benchmarks/shared: _common.py & co.
from _common import build_cli  # first: it silences warnings and Lightning's INFO logging before they import

# isort: split
import lightning.pytorch as pl
import torch
from _mujoco_throughput import collector_rate, raw_rate
from _peer_speed import ours
from lightning.pytorch.callbacks import Checkpoint
from tensordict import TensorDict

import rl_lightning.envs as envs
from rl_lightning.algos import PPO
from rl_lightning.callbacks import Evaluation

REPO = Path(__file__).resolve().parents[2]
PEER = Path(__file__).resolve().parents[1] / "peers" / "sb3_ppo.py"
GAME = "Breakout"
BACKENDS = {
    "in-process": ("GymnasiumEnv", {}),
    "sync": ("GymnasiumVectorEnv", {"mode": "sync"}),
    "async": ("GymnasiumVectorEnv", {"mode": "async"}),
    "ale-vector": ("AleVectorEnv", {}),
    "envpool": ("EnvPoolEnv", {}),
}


def _make(backend: str, preset: str = "baselines"):
    name, kwargs = BACKENDS[backend]
    return lambda: getattr(envs, name)(GAME, atari_preset=preset, **kwargs)


def _peer(peer_python: str, *args: str) -> dict[str, Any]:
    out = subprocess.run([peer_python, str(PEER), *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------------------------
# throughput
# ----------------------------------------------------------------------------------------------------------------
def act_rate(module: PPO, spec: Any, num_envs: int, ticks: int) -> float:
    """Env steps/s of ``PPO.act`` alone on ``num_envs`` stacked frames (what bounds a collector on the CPU)."""
    obs = TensorDict({"obs": torch.zeros(num_envs, *spec.obs_shape, dtype=torch.uint8)}, batch_size=[num_envs])
    generator = torch.Generator().manual_seed(0)
    module.act(obs, generator)
    start = time.perf_counter()
    for _ in range(ticks):
        module.act(obs, generator)
    return ticks * num_envs / (time.perf_counter() - start)


def run_throughput(
    num_envs: int, ticks: int, fit_steps: int, peer_python: str | None, repeats: int = 2
) -> dict[str, Any]:
    """Best of ``repeats`` interleaved rounds for the rates (noise on a shared machine only slows a run down), and
    the median of ``repeats`` alternating end-to-end fits, ours then SB3's."""
    torch.set_num_threads(2)
    torch.manual_seed(0)
    probe = _make("ale-vector")()
    module = PPO(env_spec=probe.spec, encoder="nature", hidden_sizes=())
    probe.close()
    best: dict[str, dict[str, float]] = {b: {"raw": 0.0, "collector": 0.0} for b in BACKENDS}
    act, sb3_raw, sb3_collect, ours_e2e, sb3_e2e = 0.0, 0.0, 0.0, [], []
    for round_ in range(repeats):
        for backend in BACKENDS:
            make = _make(backend)
            raw, coll = raw_rate(make, num_envs, ticks), collector_rate(make, module, num_envs, ticks)
            best[backend] = {"raw": max(best[backend]["raw"], raw), "collector": max(best[backend]["collector"], coll)}
            print(f"  [{backend} #{round_}] raw {raw:,.0f}  collector {coll:,.0f}", flush=True)
        act = max(act, act_rate(module, probe.spec, num_envs, ticks))
        run = ours("ppo_atari.yaml", fit_steps)
        ours_e2e.append(run.env_steps / run.seconds)
        print(f"  [act #{round_}] {act:,.0f}  [ours end to end #{round_}] {ours_e2e[-1]:,.0f}", flush=True)
        if peer_python is not None:
            sb3 = _peer(peer_python, "collect", "--env", "breakout", "--num-envs", str(num_envs), "--steps",
                        str(ticks), "--repeats", "1", "--vec", "subproc", "--threads", "2")  # fmt: skip
            sb3_raw, sb3_collect = max(sb3_raw, sb3["raw_sps"]), max(sb3_collect, sb3["collect_sps"])
            trained = _peer(
                peer_python, "train", "--env", "breakout", "--total-env-steps", str(fit_steps), "--threads", "2"
            )
            sb3_e2e.append(trained["env_steps"] / trained["train_seconds"])
            print(f"  [SB3 #{round_}] raw {sb3['raw_sps']:,.0f} collector {sb3['collect_sps']:,.0f} end to end "
                  f"{sb3_e2e[-1]:,.0f}", flush=True)  # fmt: skip
    rows = [{"backend": b, **rates} for b, rates in best.items()]
    result: dict[str, Any] = {"num_envs": num_envs, "rows": rows, "act": act,
                              "ours_end_to_end": statistics.median(ours_e2e)}  # fmt: skip
    if peer_python is not None:
        rows.append({"backend": "SB3 subproc", "raw": sb3_raw, "collector": sb3_collect})
        result["sb3_end_to_end"] = statistics.median(sb3_e2e)
    return result


def print_throughput(r: dict[str, Any]) -> None:
    print(f"\n== Breakout, baselines preset, {r['num_envs']} envs: env (agent) steps/s, 2 torch threads ==")
    print(f"{'backend':>12} {'raw env':>9} {'collector':>10} {'coll/raw':>9} {'serial bound':>13} {'coll/bound':>11}")
    for row in r["rows"]:
        act = r["act"] if row["backend"] != "SB3 subproc" else None
        bound = 1.0 / (1.0 / row["raw"] + 1.0 / act) if act else None
        print(
            f"{row['backend']:>12} {row['raw']:>9,.0f} {row['collector']:>10,.0f} "
            f"{row['collector'] / row['raw']:>9.2f} "
            + (f"{bound:>13,.0f} {row['collector'] / bound:>11.2f}" if bound else f"{'-':>13} {'-':>11}")
        )
    print(f"  PPO.act alone on {r['num_envs']} stacked frames: {r['act']:,.0f} env steps/s. Serial bound = "
          "1 / (1/raw + 1/act): a collector that acts, then steps, with no overhead of its own")  # fmt: skip
    print("  (collector = Collector.rollout with ppo_atari.yaml's PPO: Nature CNN, shared; SB3: PPO.collect_rollouts")
    print("   with its CnnPolicy on SubprocVecEnv + AtariWrapper + VecFrameStack(4); target: >= 0.5 of raw)")
    line = f"  PPO end to end (training only, median of the fits): ours {r['ours_end_to_end']:,.0f} env steps/s"
    if "sb3_end_to_end" in r:
        ratio = r["ours_end_to_end"] / r["sb3_end_to_end"]
        line += f", SB3 {r['sb3_end_to_end']:,.0f}: {ratio:.2f}x ({'PASS' if ratio > 1 else 'MISS'}: ahead of SB3)"
    print(line)


# ----------------------------------------------------------------------------------------------------------------
# learning: PPO Breakout through the CLI, read back from TensorBoard
# ----------------------------------------------------------------------------------------------------------------
def run_learning(
    out: Path, total_env_steps: int, seed: int, extra: list[str] | None = None, config: str = "ppo_atari.yaml"
) -> Path:
    cmd = [sys.executable, "-m", "rl_lightning.cli", "fit", "--config", str(REPO / "configs" / config)]
    cmd += ["--seed_everything", str(seed), "--data.init_args.total_env_steps", str(total_env_steps)]
    cmd += extra or []
    cmd += ["--trainer.logger.init_args.save_dir", str(out), "--trainer.enable_progress_bar", "false"]
    print("  $", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=out)
    return sorted((out / Path(config).stem).iterdir())[-1]  # the bundled configs log under their own name


def print_curve(run: Path, target: float = 10.0) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    if "env_steps" not in tags:
        raise SystemExit(f"{run}: no update logged yet; read it again later")
    steps = acc.Scalars("env_steps")
    wall = steps[-1].wall_time - steps[0].wall_time
    print(f"\n== PPO Breakout ({run}): whole games, raw score (sampled policy, 8 games per evaluation) ==")
    print(f"  {int(steps[-1].value):,} env steps in {wall / 60:.1f} min ({steps[-1].value / wall:,.0f} env steps/s)")
    if "eval/episode_return" not in tags:
        print("  no evaluation yet (the first comes at 100k env steps)")
        return
    evals = acc.Scalars("eval/episode_return")
    for e in evals:
        print(f"  {e.step:>10,}  {e.value:8.2f}")
    final = evals[-1].value
    print(f"  final {final:.2f}; target >= {target} (random ~1.5): {'PASS' if final >= target else 'MISS'}")


# ----------------------------------------------------------------------------------------------------------------
# dreamer: replay bytes per transition, gradient steps/s, world-model loss over the first updates
# ----------------------------------------------------------------------------------------------------------------
class _Record(pl.Callback):
    def __init__(self) -> None:
        self.loss_pred: list[float] = []
        self.seconds: list[float] = []
        self._start = 0.0

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        metrics = pl_module.last_metrics
        if "train/loss_pred" in metrics:
            self.loss_pred.append(float(metrics["train/loss_pred"]))
            self.seconds.append(time.perf_counter() - self._start)


def run_dreamer(size: str, updates: int, batch: int, seq: int) -> dict[str, Any]:
    """``updates`` updates of one gradient step each (replay ratio 1/16 on 16-tick windows) after the prefill."""
    torch.set_num_threads(2)
    window, prefill = 16, 1024
    extra = ["--model.init_args.size", size, "--data.init_args.batch_size", str(batch),
             "--data.init_args.sequence_length", str(seq), "--data.init_args.replay_ratio", str(1 / window),
             "--data.init_args.learning_starts", str(prefill), "--data.init_args.buffer_size", "20000",
             "--data.init_args.total_env_steps", str(prefill + window * updates)]  # fmt: skip
    cli = build_cli("dreamer_atari.yaml", 0, extra)
    record = _Record()
    cli.trainer.callbacks[:] = [c for c in cli.trainer.callbacks if not isinstance(c, (Evaluation, Checkpoint))]
    cli.trainer.callbacks.append(record)
    cli.trainer.fit(cli.model, cli.datamodule)
    ring = cli.datamodule.replay
    leaves = ring.tensors()
    per_row = sum(t[0].nbytes for t in leaves)  # one time row = num_envs transitions
    frame = leaves_frame_bytes(cli.datamodule.env_spec)
    return {
        "size": size,
        "params": sum(p.numel() for p in cli.model.parameters()),
        "bytes_per_transition": per_row / ring.num_envs,
        "frame_bytes": frame,
        "step_seconds": statistics.median(record.seconds[1:]) if len(record.seconds) > 1 else float("nan"),
        "loss_pred": record.loss_pred,
        "batch": (batch, seq),
    }


def leaves_frame_bytes(spec: Any) -> int:
    return sum(int(torch.Size(leaf.shape).numel()) * leaf.dtype.itemsize for _, leaf in spec.obs_leaves())


def print_dreamer(results: list[dict[str, Any]]) -> None:
    print("\n== DreamerV3, dreamer_atari.yaml (Breakout, machado preset), CPU, 2 torch threads ==")
    for r in results:
        overhead = r["bytes_per_transition"] / r["frame_bytes"] - 1
        print(f"  size {r['size']} ({r['params']:,} params), batch {r['batch'][0]} x {r['batch'][1]}:")
        print(f"    replay bytes per transition {r['bytes_per_transition']:,.0f} = uint8 frame {r['frame_bytes']:,} "
              f"+ {overhead:.1%} ({'PASS' if overhead <= 0.10 else 'MISS'}: within 10%)")  # fmt: skip
        print(f"    gradient step {r['step_seconds']:.2f} s ({1 / r['step_seconds']:.3f} gradient steps/s)")
        losses = r["loss_pred"]
        if len(losses) >= 4:
            q = max(1, len(losses) // 4)
            first, last = statistics.mean(losses[:q]), statistics.mean(losses[-q:])
            print(f"    world-model prediction loss (rec + rew + con), mean of first/last {q} of {len(losses)} updates:"
                  f" {first:.1f} -> {last:.1f} ({'falling' if last < first else 'NOT falling'})")  # fmt: skip
            print("    per update: " + " ".join(f"{v:.0f}" for v in losses))


# ----------------------------------------------------------------------------------------------------------------
# memory: peak RSS of a short PPO Breakout run; a uint8 replay ring against float32
# ----------------------------------------------------------------------------------------------------------------
# Peak RSS as the child's own VmHWM: ``ru_maxrss`` would not do, Linux carries the parent's peak into it across the
# fork and exec, so a big benchmark process inflated the empty baseline (0.64 GiB measured for a 1.14 GiB ring).
_PEAK_RSS = "int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) * 1024"
_RING_SCRIPT = """
import sys, torch
from tensordict import TensorDict
from rl_lightning.data.replay import ReplayRing
rows, dtype = int(sys.argv[1]), getattr(torch, sys.argv[2])
ring = ReplayRing(max(rows, 1000), 1, "cpu")  # storage is allocated by the first add
chunk = 1000
frames = torch.randint(0, 256, (chunk, 1, 3, 64, 64), dtype=torch.uint8).to(dtype)
for _ in range(rows // chunk):
    ring.add(TensorDict({"obs": frames, "reward": torch.zeros(chunk, 1), "action": torch.zeros(chunk, 1, 18),
                         "is_first": torch.zeros(chunk, 1, dtype=torch.bool),
                         "terminated": torch.zeros(chunk, 1, dtype=torch.bool),
                         "truncated": torch.zeros(chunk, 1, dtype=torch.bool)}, batch_size=[chunk, 1]))
print(HIGH_WATER)
""".replace("HIGH_WATER", _PEAK_RSS)


def ring_rss(rows: int, dtype: str) -> int:
    cmd = [sys.executable, "-c", _RING_SCRIPT, str(rows), dtype]
    return int(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])


_FIT_SCRIPT = """
import runpy, sys
sys.argv = ["rl-lightning", *sys.argv[1:]]
try:
    runpy.run_module("rl_lightning.cli", run_name="__main__")
finally:
    print("PEAK_RSS", HIGH_WATER)
""".replace("HIGH_WATER", _PEAK_RSS)


def fit_rss(fit_steps: int) -> int:
    """Peak RSS of a ``ppo_atari.yaml`` fit of ``fit_steps`` env steps (its own process)."""
    args = ["fit", "--config", str(REPO / "configs" / "ppo_atari.yaml"), "--data.init_args.total_env_steps",
            str(fit_steps), "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:  # the fit's config.yaml and checkpoints land here, not in the repo
        out = subprocess.run(
            [sys.executable, "-c", _FIT_SCRIPT, *args], check=True, capture_output=True, text=True, cwd=scratch
        )
    return int(next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("PEAK_RSS")))


def run_memory(rows: int, fit_steps: int) -> dict[str, Any]:
    """Peak RSS of the PPO fit; the rings' own RSS is their process's peak minus that of a process that imports the
    same modules and allocates no ring."""
    baseline = ring_rss(0, "uint8")
    return {"ppo_rss": fit_rss(fit_steps), "rows": rows, "uint8": ring_rss(rows, "uint8") - baseline,
            "float32": ring_rss(rows, "float32") - baseline}  # fmt: skip


def print_memory(r: dict[str, Any]) -> None:
    gib = 2**30
    print("\n== Memory (peak RSS) ==")
    print(f"  PPO Breakout run (ppo_atari.yaml, 8 envs, rollout 8 x 128 uint8 frames): {r['ppo_rss'] / gib:.2f} GiB")
    print(f"  replay ring of {r['rows']:,} Atari transitions (3x64x64 frames), RSS above an empty process: uint8 "
          f"{r['uint8'] / gib:.2f} GiB, float32 {r['float32'] / gib:.2f} GiB "
          f"({r['float32'] / r['uint8']:.1f}x)")  # fmt: skip
    scale = 1_000_000 / r["rows"]
    print(f"  at 1M transitions (x{scale:.0f}, the ring is linear in its rows): uint8 ~{r['uint8'] * scale / gib:.1f} "
          f"GiB vs float32 ~{r['float32'] * scale / gib:.1f} GiB")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="throughput,dreamer,memory", help="throughput,learning,dreamer,memory")
    parser.add_argument("--peer-python", default=None, help="python of a venv with stable-baselines3 (SB3 columns)")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--ticks", type=int, default=250, help="throughput: env ticks per measurement")
    parser.add_argument("--repeats", type=int, default=2, help="throughput: interleaved rounds (best rate, median fit)")
    parser.add_argument("--fit-steps", type=int, default=8192, help="end-to-end and memory: env steps of the fit")
    parser.add_argument("--out", type=Path, default=Path("."), help="learning: log directory")
    parser.add_argument("--total-env-steps", type=int, default=1_000_000, help="learning: agent steps")
    parser.add_argument("--fit-args", default="", help="learning: more options for the fit, e.g. "
                        "'--data.init_args.num_actors 1' (collection in an actor process)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default="ppo_atari.yaml", help="learning: a bundled config, e.g. the async one")
    parser.add_argument("--read", type=Path, default=None, help="only print the tables of a finished learning run")
    parser.add_argument("--presets", default="XS,S", help="dreamer: model sizes")
    parser.add_argument("--dreamer-updates", type=int, default=30, help="dreamer: gradient steps timed/recorded")
    parser.add_argument("--dreamer-batch", default="16x64", help="dreamer: batch x sequence length")
    parser.add_argument("--ring-rows", type=int, default=100_000, help="memory: transitions in the measured ring")
    args = parser.parse_args()
    if args.read is not None:
        print_curve(args.read)
        return
    sections = set(args.sections.split(","))
    if "throughput" in sections:
        print_throughput(run_throughput(args.num_envs, args.ticks, args.fit_steps, args.peer_python, args.repeats))
    if "dreamer" in sections:
        batch, seq = (int(x) for x in args.dreamer_batch.split("x"))
        print_dreamer([run_dreamer(s, args.dreamer_updates, batch, seq) for s in args.presets.split(",")])
    if "memory" in sections:
        print_memory(run_memory(args.ring_rows, args.fit_steps))
    if "learning" in sections:
        args.out.mkdir(parents=True, exist_ok=True)
        run = run_learning(args.out.resolve(), args.total_env_steps, args.seed, args.fit_args.split(), args.config)
        print_curve(run)


if __name__ == "__main__":
    main()
