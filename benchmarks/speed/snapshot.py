"""What a ``GymnasiumEnv`` snapshot costs against one env step (issue 20: at most 2x on HalfCheetah and Breakout).

    python benchmarks/speed/snapshot.py [--rounds 200] [--block 10]

One env per backend, through the adapter as SPO's search uses it: a step is ``step_state(inplace=True)`` with a
uniform-random action (episode ends and their resets included), a snapshot is ``snapshot`` of the live state then
``release`` of the copy (the released env goes back to the pool). The Gymnasium env's own ``step`` (no adapter,
same wrappers) is timed too, as the stricter denominator. Each round times a block of each, the snapshots taken
of the state the adapter's steps reached, so all see the same machine load; the table gives the median over rounds
of the time per call, and ``copy.deepcopy`` of the live env (the old snapshot: a fresh env for MuJoCo and ALE;
median of 3).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings

import gymnasium
import torch

from rl_lightning.envs import GymnasiumEnv
from rl_lightning.envs.base import EnvSpec

warnings.filterwarnings("ignore")

#: name, constructor arguments, whether the issue's 2x target applies.
ENVS = [
    ("CartPole-v1", {"env_id": "CartPole-v1"}, False),
    ("HalfCheetah-v5", {"env_id": "HalfCheetah-v5"}, True),
    ("Hopper-v5", {"env_id": "Hopper-v5"}, False),
    ("ALE/Breakout-v5", {"env_id": "ALE/Breakout-v5"}, True),
    ("Breakout (baselines)", {"env_id": "Breakout", "atari_preset": "baselines"}, True),
]


def random_action(spec: EnvSpec, generator: torch.Generator) -> torch.Tensor:
    """One uniform-random action for a single env (discrete or bounded Box)."""
    if spec.discrete:
        return torch.randint(spec.num_actions, (1,), generator=generator)
    low, high = torch.tensor(spec.action_low), torch.tensor(spec.action_high)
    return (low + (high - low) * torch.rand(low.shape, generator=generator)).reshape(1, *spec.action_shape)


def raw_steps(raw: gymnasium.Env, actions: list[torch.Tensor]) -> float:
    """Seconds per ``raw.step`` (resetting at episode ends, as the adapter does)."""
    numpy_actions = [a.numpy()[0] for a in actions]
    start = time.perf_counter()
    for action in numpy_actions:
        _, _, terminated, truncated, _ = raw.step(action)
        if terminated or truncated:
            raw.reset()
    return (time.perf_counter() - start) / len(actions)


def measure(env: GymnasiumEnv, rounds: int, block: int) -> tuple[float, float, float, float]:
    """Median microseconds per adapter step, raw step and snapshot (+ release), interleaved; ``copy.deepcopy``."""
    generator = torch.Generator().manual_seed(0)
    state = env.reset_state(1, generator)
    raw = env.factory()
    raw.reset(seed=0)
    steps, raws, snaps = [], [], []
    for _ in range(rounds + 1):  # the first round warms up (pool, caches) and is dropped
        actions = [random_action(env.spec, generator) for _ in range(block)]
        start = time.perf_counter()
        for action in actions:
            state, _ = env.step_state(state, action, generator, inplace=True)
        steps.append((time.perf_counter() - start) / block)
        raws.append(raw_steps(raw, actions))
        start = time.perf_counter()
        for _ in range(block):
            env.release(env.snapshot(state))
        snaps.append((time.perf_counter() - start) / block)
    raw.close()
    live = env._env(int(state["snapshot"][0]))
    deeps = []
    for _ in range(3):
        start = time.perf_counter()
        copy.deepcopy(live).close()
        deeps.append(time.perf_counter() - start)
    deep = statistics.median(deeps)
    if env.live_count != 1:
        raise RuntimeError(f"{env.env_id}: {env.live_count} envs live after the benchmark, expected 1 (a leak)")
    env.release(state)
    return tuple(statistics.median(x[1:]) * 1e6 for x in (steps, raws, snaps)) + (deep * 1e6,)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="interleaved rounds (median over them)")
    parser.add_argument("--block", type=int, default=10, help="calls timed together in a round")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| env | step us (adapter) | step us (raw env) | snapshot us | ratio (adapter) | ratio (raw) | "
          "target: <= 2x raw | deepcopy us (old snapshot) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name, kwargs, target in ENVS:
        env = GymnasiumEnv(**kwargs)
        try:
            step, raw, snap, deep = measure(env, args.rounds, args.block)
        finally:
            env.close()
        verdict = ("PASS" if snap <= 2 * raw else "FAIL") if target else "-"
        print(f"| {name} | {step:.0f} | {raw:.0f} | {snap:.0f} | {snap / step:.2f} | {snap / raw:.2f} | {verdict} | "
              f"{deep:.0f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
