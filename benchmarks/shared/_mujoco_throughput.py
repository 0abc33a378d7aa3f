"""Env steps/s on HalfCheetah-v5 per Gymnasium backend: raw ``BatchedEnv.step`` and ``Collector.rollout(PPO.act)``.

Used by ``ppo_mujoco.py --sections throughput`` to choose the bundled config's backend. The policy is the config's
(its ``model.init_args``, untrained); rates are the best of 3 interleaved repeats (a shared machine only slows).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml

from rl_lightning.algos import PPO
from rl_lightning.data.collector import Collector
from rl_lightning.envs.base import BatchedEnv, TorchEnv
from rl_lightning.envs.gymnasium import EnvPoolEnv, GymnasiumEnv, GymnasiumVectorEnv
from rl_lightning.envs.random_action import random_action

ENV_ID = "HalfCheetah-v5"
BACKENDS: dict[str, Callable[[], TorchEnv]] = {
    "in-process": lambda: GymnasiumEnv(env_id=ENV_ID),
    "sync": lambda: GymnasiumVectorEnv(env_id=ENV_ID, mode="sync"),
    "async": lambda: GymnasiumVectorEnv(env_id=ENV_ID, mode="async"),
}
if importlib.util.find_spec("envpool") is not None:
    BACKENDS["envpool"] = lambda: EnvPoolEnv(env_id=ENV_ID)


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


#: SB3's VecEnv of the same kind as each of our backends (in-process stepping, or one subprocess per env).
SB3_KIND = {"in-process": "dummy", "sync": "dummy", "async": "subproc"}


def peer_rates(peer_python: str, num_envs: int, ticks: int, repeats: int) -> dict[str, dict[str, float]]:
    """SB3's ``collect_rollouts`` (its MlpPolicy) and raw VecEnv rates, ``DummyVecEnv`` and ``SubprocVecEnv``."""
    script = Path(__file__).resolve().parents[1] / "peers" / "sb3_ppo.py"
    rates = {}
    for vec in ("dummy", "subproc"):
        cmd = [peer_python, str(script), "collect", "--env", "halfcheetah", "--num-envs", str(num_envs)]
        cmd += ["--steps", str(ticks), "--repeats", str(repeats), "--vec", vec]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rates[vec] = json.loads(out.strip().splitlines()[-1])
    return rates


def run_throughput(
    config: Path, num_envs: int | None, steps: int = 2000, repeats: int = 3, peer_python: str | None = None
) -> list[dict[str, Any]]:
    """One row per backend: raw and collector env steps/s at the config's (or the given) number of envs; with
    ``peer_python``, SB3's rates on the VecEnv of the same kind beside each."""
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
    rows = [
        {"backend": name, "num_envs": num_envs, "raw": max(raw[name]), "collector": max(coll[name])}
        for name in BACKENDS
    ]
    if peer_python is not None:
        peers = peer_rates(peer_python, num_envs, steps // num_envs, repeats)
        for row in rows:
            kind = SB3_KIND.get(row["backend"])
            if kind is not None:
                row["sb3_vec"], row["sb3"] = kind, peers[kind]["collect_sps"]
        for kind, rate in peers.items():
            rows.append({"backend": f"SB3 {kind}", "num_envs": num_envs, "raw": rate["raw_sps"],
                         "collector": rate["collect_sps"]})  # fmt: skip
    return rows


def print_throughput(rows: list[dict[str, Any]]) -> None:
    print(f"\n== {ENV_ID} env steps/s per backend (1 torch thread, best of 3 interleaved repeats) ==")
    print(f"{'backend':>11} {'num_envs':>8} {'raw env':>9} {'collector':>10} {'coll/raw':>9} {'vs SB3 same kind':>18}")
    for r in rows:
        versus = f"{r['collector'] / r['sb3']:.2f}x {r['sb3_vec']}" if "sb3" in r else ""
        print(
            f"{r['backend']:>11} {r['num_envs']:>8} {r['raw']:>9,.0f} {r['collector']:>10,.0f} "
            f"{r['collector'] / r['raw']:>9.2f} {versus:>18}"
        )
    print("  (raw = BatchedEnv.step with random actions; collector = Collector.rollout with the config's PPO.act;")
    print(
        "   SB3 rows: its VecEnv stepped with random actions, and PPO.collect_rollouts with its MlpPolicy, same nets;"
    )
    print("   target: collector >= 0.5 of its backend's raw rate, and ahead of SB3 on the same kind of VecEnv)")
