"""Run in a fresh process by ``test_inference.py``: load a checkpoint and act in plain Gymnasium loops.

``python tests/inference_loops.py KIND CKPT ENV_ID EPISODES SEED`` prints one JSON object. The episodes start from
the seeds rl_lightning's evaluation gives its envs (``draw_seeds`` from ``SEED``), so their returns can be
compared with what the run's ``Evaluation`` logged.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import gymnasium
import numpy as np
import torch
from tensordict import TensorDict

import rl_lightning
from rl_lightning import keys
from rl_lightning.algos import PPO
from rl_lightning.envs import GymnasiumEnv
from rl_lightning.envs.base import BatchedEnv
from rl_lightning.envs.gymnasium.backend import draw_seeds


def eval_seeds(episodes: int, seed: int) -> list[int]:
    """The env seeds ``run_episodes(..., seed=seed)`` resets its ``episodes`` env rows with."""
    return draw_seeds(episodes, torch.Generator().manual_seed(seed))


def module_action(module: Any, obs: np.ndarray, space: gymnasium.Space) -> Any:
    """The module's own deterministic ``act`` on one raw observation, in the space's terms (written out here)."""
    td = TensorDict({keys.OBS: torch.as_tensor(obs, dtype=torch.float32)[None]}, batch_size=[1])
    action = module.act(td, deterministic=True)[keys.ACTION][0].numpy()
    if isinstance(space, gymnasium.spaces.Discrete):
        return int(action) + int(space.start)
    return np.clip(action.reshape(space.shape), space.low, space.high).astype(space.dtype)


def play(policy: Any, env: gymnasium.Env, seeds: list[int], check: Any = None) -> tuple[list[float], list[Any]]:
    """One episode per seed, the plain Gymnasium way; returns the episode returns and every observation seen."""
    returns, seen = [], []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        policy.reset()
        total, done = 0.0, False
        while not done:
            action = policy(obs)
            assert env.action_space.contains(action), (action, env.action_space)
            if check is not None:
                check(obs, action)
            seen.append(obs)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return returns, seen


def ppo(ckpt: str, env_id: str, episodes: int, seed: int) -> dict[str, Any]:
    policy = rl_lightning.load_policy(ckpt)
    module = policy.module
    env = gymnasium.make(env_id)
    mismatches = []

    def check(obs: np.ndarray, action: Any) -> None:
        expected = module_action(module, obs, env.action_space)
        if not np.array_equal(np.asarray(action), np.asarray(expected)):
            mismatches.append((np.asarray(action).tolist(), np.asarray(expected).tolist()))

    stats_before = {k: v.clone() for k, v in module.state_dict().items() if "normalizer" in k}
    returns, seen = play(policy, env, eval_seeds(episodes, seed), check)
    batch = np.stack(seen)
    batched = policy(batch)
    singles = np.stack([policy(obs) for obs in seen])
    from_tensor = policy(torch.as_tensor(batch))
    forward = PPO.load_from_checkpoint(ckpt, map_location="cpu")(batch)  # ``module(obs)``: the Lightning way
    out = {
        "returns": returns,
        "mismatches": mismatches,
        "single_action_type": type(policy(seen[0])).__name__,
        "batched_shape": list(batched.shape),
        "batched_dtype": str(batched.dtype),
        "batched_equals_singles": bool(np.allclose(batched, singles, rtol=0, atol=1e-6)),
        "tensor_is_tensor": isinstance(from_tensor, torch.Tensor),
        "tensor_equals_numpy": bool(np.allclose(from_tensor.numpy(), batched, rtol=0, atol=1e-6)),
        "forward_is_tensor": isinstance(forward, torch.Tensor),
        "forward_matches": bool(np.allclose(policy(batch), _in_space(forward, env.action_space), atol=1e-6)),
        "stats_frozen": all(torch.equal(v, module.state_dict()[k]) for k, v in stats_before.items()),
        "has_normalizer": module.obs_normalizer is not None,
    }
    if module.obs_normalizer is not None:  # the saved statistics are what the policy acts on
        module.obs_normalizer = None
        out["normalizer_changes_actions"] = not np.allclose(policy(batch), batched, atol=1e-4)
    return out


def _in_space(action: torch.Tensor, space: gymnasium.Space) -> np.ndarray:
    if isinstance(space, gymnasium.spaces.Discrete):
        return action.numpy() + int(space.start)
    return np.clip(action.numpy(), space.low, space.high)


def spo(ckpt: str, env_id: str, episodes: int, seed: int) -> dict[str, Any]:
    policy = rl_lightning.load_policy(ckpt)
    env = gymnasium.make(env_id)
    prior_returns, seen = play(policy, env, eval_seeds(2, seed))
    modes = [policy(obs, deterministic=True) == module_action(policy.module, obs, env.action_space) for obs in seen]
    # Search, as evaluation runs it: a snapshot-capable env over the same seeds, generator seeded seed + 1.
    search_env = GymnasiumEnv(env_id)
    batched = BatchedEnv(search_env, episodes, seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    batched.reset()
    returns = torch.zeros(episodes)
    running = torch.ones(episodes, dtype=torch.bool)
    while bool(running.any()):
        action = policy.search(batched, generator=generator)
        out = batched.step(action)
        returns += out[keys.REWARD] * running
        running &= ~(out[keys.TERMINATED] | out[keys.TRUNCATED])
    batched.close()
    return {
        "prior_returns": prior_returns,
        "prior_mode_matches": all(modes),
        "search_returns": returns.tolist(),
        "live_after_close": search_env.live_count,
    }


def dreamer(ckpt: str, env_id: str, episodes: int, seed: int) -> dict[str, Any]:
    policy = rl_lightning.load_policy(ckpt)
    env = gymnasium.make(env_id)
    player = policy.module.player(1, torch.device("cpu"), deterministic=True)  # driven by hand: the reference
    mismatches = []
    first = [True]

    def check(obs: np.ndarray, action: Any) -> None:
        view = TensorDict({keys.OBS: torch.as_tensor(obs, dtype=torch.float32)[None]}, batch_size=[1])
        view[keys.IS_FIRST] = torch.tensor([first[0]])
        expected = int(player(view, torch.Generator())[keys.ACTION][0])
        first[0] = False
        if action != expected:
            mismatches.append((action, expected))

    seeds = eval_seeds(episodes, seed)
    returns = []
    for episode_seed in seeds:
        first[0] = True
        episode_returns, seen = play(policy, env, [episode_seed], check)
        returns += episode_returns
    return {"returns": returns, "mismatches": mismatches, **dreamer_state_checks(policy, seen)}


def dreamer_state_checks(policy: Any, seen: list[np.ndarray]) -> dict[str, Any]:
    """The recurrent state is carried between calls, cleared by ``reset()`` and per row by ``reset(rows)``."""
    o1, o2 = seen[0], seen[1]
    policy.reset()
    a1 = policy(o1)
    s1 = policy.state["deter"].clone()
    policy(o2)
    s2 = policy.state["deter"].clone()
    policy.reset()
    cleared = policy.state is None
    again = policy(o1)
    s1_again = policy.state["deter"].clone()
    policy.reset()
    policy(np.stack([o1, o1]))
    policy(np.stack([o2, o2]))
    policy.reset(rows=[0])
    policy(np.stack([o1, o1]))
    rows = policy.state["deter"]
    return {
        "state_carried": not torch.equal(s1, s2),
        "reset_clears": cleared and again == a1 and torch.equal(s1_again, s1),
        # batch 2 against batch 1: equal up to float rounding, so compared with a tolerance
        "row_reset": torch.allclose(rows[0], s1[0], atol=1e-5) and not torch.allclose(rows[1], s1[0], atol=1e-3),
    }


if __name__ == "__main__":
    kind, path, env_name, num, base_seed = sys.argv[1:6]
    runner = {"ppo": ppo, "spo": spo, "dreamer": dreamer}[kind]
    print(json.dumps(runner(path, env_name, int(num), int(base_seed))))
