"""Actors on Ray (issue 36): env steps/s against the number of Ray actors, on a local Ray instance and on a
simulated two-node cluster, and what a rollout costs on Ray beyond its collection, against actor processes.

    python benchmarks/speed/ray_actors.py                       # every section, the settings of benchmarks/NOTES.md
    python benchmarks/speed/ray_actors.py --sections overhead --rollouts 40

Sections (each its own function):
  local     a local Ray instance (``--local-cpus`` logical CPUs, so 4 actors fit on 2 cores): 1, 2, 4 Ray actors
            stepping ``--num-envs`` envs in all of a CartPole that sleeps ``--step-ms`` per env per step (a slow
            simulator: scaling shows even on 2 cores); the actor processes on the same settings beside it.
  cluster   the same with 1 and 2 actors on a ``ray.cluster_utils.Cluster``: a head and a second node of one CPU
            each on 127.0.0.1 (the actors fill the second node first).
  overhead  the plain CartPole (no sleep), one actor: the learner's wall time per rollout against the actor's own
            collect time, Ray against processes; the difference is the transport's cost per rollout (weights out,
            rollout back, the learner's waiting loop).

The learner is a stand-in: it publishes new weights (a new version) and takes one rollout from every actor per
"update", doing nothing else, so the figures are the actors' side alone. ``max_policy_lag`` 1 (one request in flight
per actor, one slot per process actor). The first ``--warmup`` rollouts (actor start-up) are not timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
# the actors (spawned processes, Ray workers) import the slow env from here too
os.environ["PYTHONPATH"] = os.pathsep.join([*sys.path[:2], os.environ.get("PYTHONPATH", "")])

import ray  # noqa: E402
import torch  # noqa: E402
from _sleepy_cartpole import SleepyCartPole  # noqa: E402

from rl_lightning.algos import PPO  # noqa: E402
from rl_lightning.data.actors import ActorPool, PoolSettings  # noqa: E402
from rl_lightning.data.actors.ray_checks import init_ray  # noqa: E402
from rl_lightning.data.actors.ray_pool import RayActorPool  # noqa: E402


def measure(backend: str, num_actors: int, args: argparse.Namespace, step_ms: float) -> dict[str, float]:
    """Env steps/s, and the learner's wall ms per rollout (mean, median) against the actors' collect ms (mean),
    over ``--rollouts``."""
    env = SleepyCartPole(step_ms)
    module = PPO(env_spec=env.spec, hidden_sizes=(64, 64))
    settings = PoolSettings(num_actors, args.num_envs, args.num_steps, 1, 3, 600.0, 0)
    kind = RayActorPool if backend == "ray" else ActorPool
    pool = kind(settings, env, module.policy_factory(), module.state_dict())
    try:
        version = 0
        for _ in range(args.warmup):
            pool.publish(module.state_dict(), version)
            pool.next_rollout(version)
            version += 1
        steps, collect_ms, wall_ms = 0, [], []
        start = time.perf_counter()
        for _ in range(args.rollouts):
            began = time.perf_counter()
            pool.publish(module.state_dict(), version)
            rollout = pool.next_rollout(version)
            wall_ms.append(1e3 * (time.perf_counter() - began))
            # collect_sps counts every actor's steps over the slowest actor's collect time: this is that time
            collect_ms.append(1e3 * args.num_envs * args.num_steps / rollout.stats["perf/collect_sps"])
            steps += rollout.env_steps
            version += 1
        elapsed = time.perf_counter() - start
    finally:
        pool.close()
    return {
        "sps": steps / elapsed,
        "wall_ms": statistics.mean(wall_ms),
        "wall_median_ms": statistics.median(wall_ms),
        "collect_ms": statistics.mean(collect_ms),
    }


def _row(label: str, figures: dict[str, float], base: float | None = None) -> None:
    scale = f"{figures['sps'] / base:5.2f}x" if base else "   1x"
    print(
        f"  {label:<28} {figures['sps']:9.0f} env steps/s {scale}   learner {figures['wall_ms']:7.1f} ms/rollout "
        f"(median {figures['wall_median_ms']:.1f}), "
        f"slowest actor collects {figures['collect_ms']:6.1f} ms"
    )


def local(args: argparse.Namespace) -> None:
    print(f"local Ray instance ({args.local_cpus} logical CPUs), {args.step_ms:g} ms per env per step:")
    init_ray(address="local", num_cpus=args.local_cpus, include_dashboard=False, log_to_driver=False)
    try:
        base = None
        for n in (1, 2, 4):
            figures = measure("ray", n, args, args.step_ms)
            base = base or figures["sps"]
            _row(f"Ray, {n} actor(s)", figures, base)
    finally:
        ray.shutdown()
    base = None
    for n in (1, 2, 4):
        figures = measure("processes", n, args, args.step_ms)
        base = base or figures["sps"]
        _row(f"processes, {n} actor(s)", figures, base)


def cluster(args: argparse.Namespace) -> None:
    from ray.cluster_utils import Cluster

    print(f"two-node cluster (head 1 CPU + node 1 CPU on 127.0.0.1), {args.step_ms:g} ms per env per step:")
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        nodes.add_node(num_cpus=1)
        init_ray(address=nodes.address, log_to_driver=False)
        base = None
        for n in (1, 2):
            figures = measure("ray", n, args, args.step_ms)
            base = base or figures["sps"]
            _row(f"Ray on the cluster, {n} actor(s)", figures, base)
    finally:
        ray.shutdown()
        nodes.shutdown()


def overhead(args: argparse.Namespace) -> None:
    print("overhead per rollout, plain CartPole (no sleep), 1 actor:")
    init_ray(address="local", num_cpus=args.local_cpus, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = measure("ray", 1, args, 0.0)
    finally:
        ray.shutdown()
    in_processes = measure("processes", 1, args, 0.0)
    for label, figures in (("Ray", on_ray), ("processes", in_processes)):
        _row(label, figures)
        print(f"    {label}: {figures['wall_ms'] - figures['collect_ms']:.1f} ms per rollout beyond collecting")


SECTIONS = {"local": local, "cluster": cluster, "overhead": overhead}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="local,cluster,overhead", help="comma-separated: " + ",".join(SECTIONS))
    parser.add_argument("--num-envs", type=int, default=8, help="envs in all, split between the actors")
    parser.add_argument("--num-steps", type=int, default=32, help="ticks per rollout")
    parser.add_argument("--step-ms", type=float, default=2.0, help="sleep per env per step")
    parser.add_argument("--rollouts", type=int, default=20, help="timed rollouts per setting")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rollouts first (actor start-up)")
    parser.add_argument("--local-cpus", type=int, default=4, help="logical CPUs of the local Ray instance")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()[0]:.2f} / {os.getloadavg()[1]:.2f} (1 / 5 min), {os.cpu_count()} cores")
    for name in args.sections.split(","):
        SECTIONS[name](args)


if __name__ == "__main__":
    main()
