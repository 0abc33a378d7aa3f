"""sheeprl's DreamerV3 gradient step on CPU, timed inside a real sheeprl run, in sheeprl's own virtual environment.

Not part of the package: ``benchmarks/dreamer/dreamer.py --sections peer`` calls it as a subprocess with
``--peer-python`` (a venv holding ``sheeprl==0.8.4`` and ``torch==2.13.0``); it prints one JSON line (the last line of
its stdout).

    /work/sheeprlvenv/bin/python benchmarks/peers/sheeprl_dreamer.py [--steps 20] [--warmup 2] [--seed 42]
        [--precision 32-true|bf16-mixed]

It runs sheeprl's own command line (``sheeprl.cli.run``, the ``sheeprl`` entry point, called in-process with these
Hydra overrides) in a temporary directory, which it deletes afterwards:

    exp=dreamer_v3 algo=dreamer_v3_XS env=gym env.id=CartPole-v1 env.num_envs=1 env.sync_env=True
    env.capture_video=False fabric.accelerator=cpu fabric.devices=1 fabric.precision=PRECISION num_threads=1
    algo.per_rank_batch_size=16 algo.per_rank_sequence_length=64 algo.horizon=15 algo.replay_ratio=0.25
    algo.learning_starts=1024 algo.per_rank_pretrain_steps=0 algo.total_steps=1024+4*(warmup+steps)
    algo.cnn_keys.encoder=[] algo.cnn_keys.decoder=[] algo.mlp_keys.encoder=[vector] algo.mlp_keys.decoder=[vector]
    algo.run_test=False buffer.size=4096 buffer.memmap=False buffer.checkpoint=False checkpoint.every=0
    checkpoint.save_last=False metric.log_level=0 model_manager.disabled=True seed=42

``exp=dreamer_v3`` is sheeprl's Atari recipe (batch 16 × 64, LayerNorm, SiLU, 32×32 latents, 255 bins, three fused
Adam optimisers, ``compile.enabled=False``); ``algo=dreamer_v3_XS`` sets the XS sizes (dense units 256, one MLP layer,
GRU 256, transition/representation hidden 256); the ``env``/``algo.*_keys`` overrides swap Atari frames for CartPole's
4-dim vector. 1 sync env, 1,024 random prefill steps, then one gradient step every 4 env steps (replay ratio 0.25),
so ``warmup + steps`` gradient steps in all. ``metric.log_level=0`` turns off the logger, the metric aggregator (and
the entropies the world-model loss computes only for it) and sheeprl's timers.

Timing: the script replaces ``sheeprl.algos.dreamer_v3.dreamer_v3.train`` (the function sheeprl's loop calls once per
gradient step with an already sampled ``[64, 16]`` batch: world-model loss, backward, clip, Adam step, imagination
for ``horizon`` steps from all 1,024 posteriors, actor and critic losses and steps) by a wrapper that times each call
with ``time.perf_counter`` (and ``time.process_time``). The first ``--warmup`` calls are left out of the rate, like
the warm-up steps of our ``speed`` section. Not timed: replay sampling, the slow-critic EMA sheeprl applies before each
call (a ``copy_`` over the critic's 0.39M parameters), env steps and acting. ``OMP_NUM_THREADS=1`` is set before torch
is imported and ``torch.set_num_threads(1)`` called (sheeprl's ``num_threads`` only sets ``OMP_NUM_THREADS`` after
torch is loaded, which does not change torch's pool); the JSON reports ``torch.get_num_threads()`` seen inside
``train``.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"  # before torch is imported (sheeprl sets it too late to matter)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402

T, B, HORIZON, REPLAY_RATIO, LEARNING_STARTS = 64, 16, 15, 0.25, 1024


def overrides(total_steps: int, seed: int, precision: str = "32-true") -> list[str]:
    return [
        "exp=dreamer_v3",
        "algo=dreamer_v3_XS",
        "env=gym",
        "env.id=CartPole-v1",
        "env.num_envs=1",
        "env.sync_env=True",
        "env.capture_video=False",
        "fabric.accelerator=cpu",
        "fabric.devices=1",
        f"fabric.precision={precision}",
        "num_threads=1",
        f"algo.per_rank_batch_size={B}",
        f"algo.per_rank_sequence_length={T}",
        f"algo.horizon={HORIZON}",
        f"algo.replay_ratio={REPLAY_RATIO}",
        f"algo.learning_starts={LEARNING_STARTS}",
        "algo.per_rank_pretrain_steps=0",
        f"algo.total_steps={total_steps}",
        "algo.cnn_keys.encoder=[]",
        "algo.cnn_keys.decoder=[]",
        "algo.mlp_keys.encoder=[vector]",
        "algo.mlp_keys.decoder=[vector]",
        "algo.run_test=False",
        "buffer.size=4096",
        "buffer.memmap=False",
        "buffer.checkpoint=False",
        "checkpoint.every=0",
        "checkpoint.save_last=False",
        "metric.log_level=0",
        "model_manager.disabled=True",
        f"seed={seed}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="timed gradient steps (after the warm-up ones)")
    parser.add_argument("--warmup", type=int, default=2, help="first gradient steps left out of the rate")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--precision", default="32-true", help="fabric.precision: 32-true or bf16-mixed")
    args = parser.parse_args()
    torch.set_num_threads(1)

    import sheeprl
    import sheeprl.algos.dreamer_v3.dreamer_v3 as dv3
    from sheeprl.cli import run

    original = dv3.train
    wall: list[float] = []
    cpu: list[float] = []
    seen: dict[str, int] = {}

    def timed_train(*a, **k):
        if not seen:
            optimizers = [a[5], a[6], a[7]]  # world, actor, critic (train's positional arguments)
            seen["trainable"] = sum(p.numel() for o in optimizers for g in o.param_groups for p in g["params"])
            seen["threads"] = torch.get_num_threads()
            seen["T"], seen["B"] = (int(n) for n in a[8]["terminated"].shape[:2])
        w, c = time.perf_counter(), time.process_time()
        original(*a, **k)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)

    dv3.train = timed_train
    total_steps = LEARNING_STARTS + round((args.warmup + args.steps) / REPLAY_RATIO)
    cwd, tmp = os.getcwd(), tempfile.mkdtemp(prefix="sheeprl_dreamer_")
    argv = sys.argv
    start = time.perf_counter()
    try:
        os.chdir(tmp)  # Hydra's run directory and sheeprl's log directory land here
        sys.argv = ["sheeprl", *overrides(total_steps, args.seed, args.precision)]
        with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("ignore")
            run()
    finally:
        sys.argv = argv
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)
    run_seconds = time.perf_counter() - start
    timed_wall, timed_cpu = wall[args.warmup :], cpu[args.warmup :]
    seconds = sum(timed_wall)
    print(
        json.dumps(
            {
                "peer": "sheeprl",
                "sheeprl": sheeprl.__version__,
                "torch": torch.__version__,
                "preset": "dreamer_v3_XS",
                "gradient_steps": len(timed_wall),
                "warmup_steps": len(wall) - len(timed_wall),
                "train_seconds": seconds,
                "train_cpu_seconds": sum(timed_cpu),
                "steps_per_second": len(timed_wall) / seconds if seconds > 0 else None,
                "warmup_seconds": sum(wall[: args.warmup]),
                "run_seconds": run_seconds,
                "env_steps": total_steps,
                "trainable_params": seen.get("trainable"),
                "threads": seen.get("threads"),
                "batch": [seen.get("T"), seen.get("B")],
                "horizon": HORIZON,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
