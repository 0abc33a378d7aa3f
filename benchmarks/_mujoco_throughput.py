"""Env steps/s on HalfCheetah-v5 per Gymnasium backend: raw ``BatchedEnv.step`` and ``Collector.rollout(PPO.act)``.

Used by ``ppo_mujoco.py --sections throughput`` to choose the bundled config's backend. The policy is the config's
(its ``model.init_args``, untrained); rates are the best of 3 interleaved repeats (a shared machine only slows).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml

from rl_lightning.algos import PPO
from rl_lightning.data.collector import Collector
from rl_lightning.envs.base import BatchedEnv, TorchEnv
from rl_lightning.envs.gymnasium import GymnasiumEnv, GymnasiumVectorEnv
from rl_lightning.evaluation import random_action

ENV_ID = "HalfCheetah-v5"
BACKENDS: dict[str, Callable[[], TorchEnv]] = {
    "in-process": lambda: GymnasiumEnv(env_id=ENV_ID),
    "sync": lambda: GymnasiumVectorEnv(env_id=ENV_ID, mode="sync"),
    "async": lambda: GymnasiumVectorEnv(env_id=ENV_ID, mode="async"),
}


def _config(path: Path) -> dict[str, Any]:
    with open(path) as f:
        return yaml.safe_load(f)


def raw_rate(make: Callable[[], TorchEnv], num_envs: int, steps: int) -> float:
    """``BatchedEnv.step`` with uniform-random actions, after a warm-up."""
    env = BatchedEnv(make(), num_envs, "cpu", seed=0)
    generator = torch.Generator().manual_seed(1)
    obs = env.reset()
    try:
        for _ in range(10):
            env.step(random_action(env.spec, obs, generator))
        start = time.perf_counter()
        for _ in range(steps):
            env.step(random_action(env.spec, obs, generator))
        return steps * num_envs / (time.perf_counter() - start)
    finally:
        env.env.close()


def collector_rate(make: Callable[[], TorchEnv], module: PPO, num_envs: int, steps: int) -> float:
    """``Collector.rollout(module.act)`` in rollouts of ``steps`` env ticks, after a short warm-up rollout."""
    collector = Collector(BatchedEnv(make(), num_envs, "cpu", seed=0), seed=3)
    try:
        collector.rollout(module.act, 16, 0)
        start = time.perf_counter()
        collector.rollout(module.act, steps, 0)
        return steps * num_envs / (time.perf_counter() - start)
    finally:
        collector.close()


def run_throughput(config: Path, num_envs: int | None, steps: int = 2000, repeats: int = 3) -> list[dict[str, Any]]:
    """One row per backend: raw and collector env steps/s at the config's (or the given) number of envs."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = _config(config)
    num_envs = num_envs or cfg["data"]["init_args"]["num_envs"]
    probe = BACKENDS["in-process"]()
    module = PPO(env_spec=probe.spec, **cfg["model"]["init_args"])
    probe.close()
    raw: dict[str, list[float]] = {name: [] for name in BACKENDS}
    coll: dict[str, list[float]] = {name: [] for name in BACKENDS}
    for _ in range(repeats):  # interleaved: a burst of load on the shared machine hits every backend alike
        for name, make in BACKENDS.items():
            raw[name].append(raw_rate(make, num_envs, steps // num_envs))
            coll[name].append(collector_rate(make, module, num_envs, steps // num_envs))
    return [
        {"backend": name, "num_envs": num_envs, "raw": max(raw[name]), "collector": max(coll[name])}
        for name in BACKENDS
    ]


def print_throughput(rows: list[dict[str, Any]]) -> None:
    print(f"\n== {ENV_ID} env steps/s per backend (1 torch thread, best of 3 interleaved repeats) ==")
    print(f"{'backend':>11} {'num_envs':>8} {'raw env':>9} {'collector':>10} {'coll/raw':>9}")
    for r in rows:
        print(
            f"{r['backend']:>11} {r['num_envs']:>8} {r['raw']:>9,.0f} {r['collector']:>10,.0f} "
            f"{r['collector'] / r['raw']:>9.2f}"
        )
    print("  (raw = BatchedEnv.step with random actions; collector = Collector.rollout with the config's PPO.act)")
