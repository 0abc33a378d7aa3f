"""GPU benchmark (issue 13): the figures only a GPU can give, with one command.

    python benchmarks/speed/gpu.py                          # every section on cuda:0 (about 10 minutes on an H100)
    python benchmarks/speed/gpu.py --sections collect --num-envs 4096,16384,65536
    python benchmarks/speed/gpu.py --device cpu             # plumbing check on the CPU, small sizes (no GPU figures)

Sections:

  collect   PPO CartPole collection on the GPU (default ``PPO``, (64, 64) tanh actor and critic, ``num_steps``-tick
            rollouts): ``Collector.rollout(PPO.act)``, ``FusedCollector`` eager and compiled, env steps/s at each
            ``--num-envs`` (best of ``--repeats`` interleaved repeats, ``torch.cuda.synchronize()`` around each
            timing), with the compiled collector's first rollout (its compile) beside it. Target (issue 13):
            compiled >= 10M env steps/s at >= 4,096 envs.
  speed     ``DreamerV3.update`` gradient steps/s per preset (``--presets``, default XS,S,M) at batch 16 x 64,
            eager and with ``compile_update`` (first step = compile time),
            horizon 15, in float32 and under the bfloat16 autocast of ``trainer.precision=bf16-mixed``
            (``benchmarks/dreamer/dreamer.py``'s speed measurement on this device).
  engine    ``configs/dreamer.yaml`` fitted on the GPU with the asynchronous engine (``data.engine=cuda_async``:
            actor window on its own CUDA stream, weights handed over by ``CUDAStreamWeightSync``) and with the
            synchronous one (``data.engine=cpu``: one stream), same seed and budget, alternating ``--repeats``
            times: gradient steps/s and env steps/s after the prefill, and ``perf/overlap_eff`` (the share of the
            shorter of actor window and learner update hidden behind the longer; 0 = serial, 1 = fully hidden),
            with the actor's and the learner's busy fractions (``perf/actor_busy``, ``perf/learner_busy``: each one's
            time over the update cycle's wall), medians over the second half of the updates.

Prints one table per section and the device's name; copy them into ``benchmarks/NOTES.md``'s GPU section.
Without a CUDA device (and without ``--device cpu``) it says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))  # benchmarks/shared: _common.py & co.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dreamer"))  # dreamer.py's time_preset
from _common import build_cli  # first: it silences warnings and Lightning's INFO logging before they import

# isort: split
import lightning.pytorch as pl
import torch
from dreamer import time_preset

from rl_lightning.algos import PPO
from rl_lightning.data import Collector
from rl_lightning.data.fused_collector import FusedCollector
from rl_lightning.envs import CartPole
from rl_lightning.envs.base import BatchedEnv

COLLECT_TARGET = 10e6  # issue 13: compiled PPO CartPole collection >= 10M env steps/s at >= 4,096 envs
COLLECT_TARGET_MIN_ENVS = 4096


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# ----------------------------------------------------------------------------------------------------------------
# collect: PPO CartPole collection
# ----------------------------------------------------------------------------------------------------------------
def _timed(rollout: Any, device: str, num_envs: int, num_steps: int, rollouts: int) -> float:
    """Env steps/s of ``rollouts`` calls of ``rollout()`` (each ``num_steps`` ticks of ``num_envs`` envs)."""
    _sync(device)
    start = time.perf_counter()
    for _ in range(rollouts):
        rollout()
    _sync(device)
    return rollouts * num_steps * num_envs / (time.perf_counter() - start)


def run_collect(device: str, sizes: list[int], num_steps: int, rollouts: int, repeats: int) -> list[dict[str, Any]]:
    torch.manual_seed(0)
    module = PPO(env_spec=CartPole().spec).to(device)
    module.eval()
    rows = []
    for num_envs in sizes:
        plain = Collector(BatchedEnv(CartPole(), num_envs, device, seed=0), seed=3)
        eager = FusedCollector(BatchedEnv(CartPole(), num_envs, device, seed=0), seed=3, compile=False)
        compiled = FusedCollector(BatchedEnv(CartPole(), num_envs, device, seed=0), seed=3, compile=True)
        plain.rollout(module.act, num_steps, 0)  # warm-ups; the compiled one compiles here
        eager.rollout(module, num_steps, 0)
        _sync(device)
        start = time.perf_counter()
        compiled.rollout(module, num_steps, 0)
        _sync(device)
        compile_seconds = time.perf_counter() - start
        rates: dict[str, list[float]] = {"collector": [], "fused": [], "compiled": []}
        for _ in range(repeats):  # interleaved: a shared machine's noise hits all three alike
            rates["collector"].append(
                _timed(lambda: plain.rollout(module.act, num_steps, 0), device, num_envs, num_steps, rollouts)
            )
            rates["fused"].append(
                _timed(lambda: eager.rollout(module, num_steps, 0), device, num_envs, num_steps, rollouts)
            )
            rates["compiled"].append(
                _timed(lambda: compiled.rollout(module, num_steps, 0), device, num_envs, num_steps, rollouts)
            )
        row = {"num_envs": num_envs, "compile_s": compile_seconds, **{k: max(v) for k, v in rates.items()}}
        rows.append(row)
        print(f"  [collect {num_envs} envs] collector {row['collector']:,.0f}, fused {row['fused']:,.0f}, "
              f"compiled {row['compiled']:,.0f} env steps/s (compile {compile_seconds:.1f} s)", flush=True)  # fmt: skip
        for collector in (plain, eager, compiled):
            collector.close()
    return rows


def print_collect(rows: list[dict[str, Any]], device: str) -> bool:
    print(f"\n== PPO CartPole collection on {device} (env steps/s, best of interleaved repeats) ==")
    header = (
        f"{'num_envs':>9} {'collector':>14} {'fused eager':>14} {'fused compiled':>15} {'compiled/coll':>14} "
        f"{'compile s':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['num_envs']:>9,} {r['collector']:>14,.0f} {r['fused']:>14,.0f} {r['compiled']:>15,.0f} "
              f"{r['compiled'] / r['collector']:>14.2f} {r['compile_s']:>10.1f}")  # fmt: skip
    eligible = [r["compiled"] for r in rows if r["num_envs"] >= COLLECT_TARGET_MIN_ENVS]
    if not eligible:
        print(f"  target: no row at >= {COLLECT_TARGET_MIN_ENVS:,} envs")
        return False
    best = max(eligible)
    ok = best >= COLLECT_TARGET
    print(f"  best compiled at >= {COLLECT_TARGET_MIN_ENVS:,} envs: {best:,.0f} env steps/s "
          f"({'PASS' if ok else 'MISS'}: >= {COLLECT_TARGET:,.0f})")  # fmt: skip
    return ok


# ----------------------------------------------------------------------------------------------------------------
# speed: DreamerV3 gradient steps/s per preset
# ----------------------------------------------------------------------------------------------------------------
def run_speed(
    device: str, presets: list[str], steps: int, seconds: float, compiled_modes: list[bool], precisions: list[str]
) -> list[dict[str, Any]]:
    rows = []
    for size in presets:
        for precision in precisions:
            for compiled in compiled_modes:
                r = time_preset(size, device, steps, seconds, precision=precision, compile_update=compiled)
                rows.append(r)
                print(f"  [speed {size} {precision} compile_update={compiled}] {r['rate']:.2f} gradient steps/s "
                      f"({r['steps']} steps; first step {r['first_step_s']:.1f} s)", flush=True)  # fmt: skip
    return rows


def print_speed(rows: list[dict[str, Any]], device: str) -> None:
    print(f"\n== DreamerV3.update on {device}: one gradient step on [T=64, B=16] CartPole rows, horizon 15 ==")
    header = (
        f"{'size':<6} {'precision':<11} {'compiled':>8} {'params':>12} {'steps':>6} {'steps/s':>9} {'ms/step':>9} "
        f"{'1st step s':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['size']:<6} {r['precision']:<11} {str(r['compile_update']):>8} {r['params']:>12,} {r['steps']:>6} "
              f"{r['rate']:>9.2f} {1e3 / r['rate']:>9.1f} {r['first_step_s']:>10.1f}")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# engine: DreamerV3 asynchronous CUDA engine against the synchronous one
# ----------------------------------------------------------------------------------------------------------------
class EngineRecorder(pl.Callback):
    """Per update: wall clock, gradient and env steps, and the update's ``perf/overlap_eff`` (read from
    ``last_metrics``, which ``log_update`` has already brought to the host: no extra sync)."""

    def __init__(self) -> None:
        self.points: list[tuple[float, int, int]] = []
        self.perf: dict[str, list[float]] = {"overlap_eff": [], "actor_busy": [], "learner_busy": []}

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        dm = trainer.datamodule
        self.points.append((time.perf_counter(), int(dm.local_gradient_steps), int(dm.env_steps)))
        for name, values in self.perf.items():
            value = pl_module.last_metrics.get(f"perf/{name}")
            if value is not None:
                values.append(float(value))


def run_engine_once(device: str, engine: str, size: str, env_steps: int, num_envs: int, seed: int) -> dict[str, Any]:
    accelerator = "gpu" if device.startswith("cuda") else "cpu"
    extra = [
        "--trainer.accelerator", accelerator, "--data.init_args.engine", engine,
        "--data.init_args.total_env_steps", str(env_steps), "--data.init_args.num_envs", str(num_envs),
        "--model.init_args.size", size,
    ]  # fmt: skip
    cli = build_cli("dreamer.yaml", seed, extra)
    recorder = EngineRecorder()
    cli.trainer.callbacks.append(recorder)
    cli.trainer.fit(cli.model, cli.datamodule)
    _sync(device)
    trained = [p for p in recorder.points if p[1] > 0]  # after the prefill
    first, last = trained[0], trained[-1]
    seconds = max(last[0] - first[0], 1e-9)
    steady = {name: values[len(values) // 2 :] for name, values in recorder.perf.items()}
    return {
        "engine": engine,
        "async": bool(cli.datamodule.async_engine),
        "grad_sps": (last[1] - first[1]) / seconds,
        "env_sps": (last[2] - first[2]) / seconds,
        **{name: statistics.median(values) if values else float("nan") for name, values in steady.items()},
        "updates": len(trained),
    }


def run_engine(device: str, size: str, env_steps: int, num_envs: int, repeats: int) -> list[dict[str, Any]]:
    engines = ["cuda_async", "cpu"] if device.startswith("cuda") else ["cpu"]
    rows = []
    for repeat in range(repeats):
        for engine in engines:
            r = run_engine_once(device, engine, size, env_steps, num_envs, seed=repeat)
            rows.append(r)
            print(f"  [engine {engine} run {repeat}] {r['grad_sps']:.2f} gradient steps/s, {r['env_sps']:,.0f} env "
                  f"steps/s, overlap {r['overlap_eff']:.2f}, actor busy {r['actor_busy']:.2f}, learner busy "
                  f"{r['learner_busy']:.2f} over {r['updates']} updates", flush=True)  # fmt: skip
    return rows


def print_engine(rows: list[dict[str, Any]], device: str, size: str) -> None:
    print(f"\n== DreamerV3 {size} fit (configs/dreamer.yaml) on {device}: asynchronous vs synchronous engine ==")
    header = (
        f"{'engine':<11} {'runs':>4} {'grad steps/s':>13} {'env steps/s':>12} {'overlap_eff':>12} {'actor busy':>11} "
        f"{'learner busy':>13}"
    )
    print(header)
    print("-" * len(header))
    by_engine: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_engine.setdefault(r["engine"], []).append(r)
    for engine, runs in by_engine.items():
        grad = statistics.median(r["grad_sps"] for r in runs)
        env = statistics.median(r["env_sps"] for r in runs)
        names = ("overlap_eff", "actor_busy", "learner_busy")
        perf = {name: statistics.median(r[name] for r in runs) for name in names}
        print(f"{engine:<11} {len(runs):>4} {grad:>13.2f} {env:>12,.0f} {perf['overlap_eff']:>12.2f} "
              f"{perf['actor_busy']:>11.2f} {perf['learner_busy']:>13.2f}")  # fmt: skip
    if {"cuda_async", "cpu"} <= set(by_engine):
        ratio = statistics.median(r["grad_sps"] for r in by_engine["cuda_async"]) / statistics.median(
            r["grad_sps"] for r in by_engine["cpu"]
        )
        print(f"  async / sync gradient steps/s: {ratio:.2f}")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="collect,speed,engine", help="comma list of collect,speed,engine")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu for a plumbing check, small sizes")
    parser.add_argument("--num-envs", default=None, help="collect: env counts (default 4096,16384,65536)")
    parser.add_argument("--num-steps", type=int, default=128, help="collect: ticks per rollout")
    parser.add_argument("--rollouts", type=int, default=20, help="collect: rollouts per timing")
    parser.add_argument("--repeats", type=int, default=3, help="collect and engine: interleaved repeats")
    parser.add_argument("--presets", default="XS,S,M", help="speed: DreamerV3 sizes")
    parser.add_argument("--speed-steps", type=int, default=50)
    parser.add_argument("--speed-seconds", type=float, default=60.0)
    parser.add_argument("--speed-compile", default="both", choices=["both", "eager", "compiled"],
                        help="speed: eager steps, compile_update steps, or both")  # fmt: skip
    parser.add_argument("--precisions", default="32-true,bf16-mixed", help="speed: Lightning precisions")
    parser.add_argument("--engine-size", default="S", help="engine: DreamerV3 size of the fits")
    parser.add_argument("--engine-env-steps", type=int, default=8192, help="engine: budget of each fit")
    parser.add_argument("--engine-num-envs", type=int, default=16)
    args = parser.parse_args()
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - {"collect", "speed", "engine"}
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)}; choose from collect,speed,engine")
    cpu_check = args.device == "cpu"
    if not cpu_check and not torch.cuda.is_available():
        print("benchmarks/speed/gpu.py: no CUDA device (torch.cuda.is_available() is False); run it on a GPU machine, "
              "or --device cpu to check the plumbing", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    device = "cpu" if cpu_check else "cuda"
    name = "CPU (plumbing check, small sizes)" if cpu_check else torch.cuda.get_device_name(0)
    print(f"device: {name}; torch {torch.__version__}", flush=True)
    if cpu_check:
        torch.set_num_threads(1)
    if "collect" in sections:
        sizes = _ints(args.num_envs) if args.num_envs else ([64] if cpu_check else [4096, 16384, 65536])
        steps, rollouts = (16, 2) if cpu_check else (args.num_steps, args.rollouts)
        print_collect(run_collect(device, sizes, steps, rollouts, 1 if cpu_check else args.repeats), device)
    if "speed" in sections:
        presets = ["tiny"] if cpu_check else args.presets.split(",")
        steps, seconds = (1, 5.0) if cpu_check else (args.speed_steps, args.speed_seconds)
        modes = {"both": [False, True], "eager": [False], "compiled": [True]}[args.speed_compile]
        precisions = args.precisions.split(",")
        print_speed(run_speed(device, presets, steps, seconds, modes, precisions), device)
    if "engine" in sections:
        size, env_steps = ("tiny", 1600) if cpu_check else (args.engine_size, args.engine_env_steps)
        rows = run_engine(
            device, size, env_steps, 4 if cpu_check else args.engine_num_envs, 1 if cpu_check else args.repeats
        )
        print_engine(rows, device, size)


if __name__ == "__main__":
    main()
