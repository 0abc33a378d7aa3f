"""Run whole evaluation episodes on a separate batched env: one episode per env row."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import BatchedEnv, EnvSpec, TorchEnv
from rl_lightning.video import FrameRecorder

_CHECK_EVERY = 32  # env steps between the (host-syncing) "all episodes finished?" checks


@torch.no_grad()
def run_episodes(
    policy: object,
    env: TorchEnv,
    num_episodes: int,
    device: torch.device,
    seed: int,
    deterministic: bool = True,
    max_steps: int = 10_000,
    recorder: FrameRecorder | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Play the first episode of each of ``num_episodes`` env rows; returns ``(returns, lengths)``, each ``[N]``.

    ``policy`` is an ``RLModule`` (its ``acting_policy`` in evaluation mode) or the string ``"random"`` for a
    uniform-random baseline (uniform over legal actions, or over the box bounds). The episodes' env states are
    released at the end; ``env`` itself stays open for the caller to reuse and close. A ``recorder`` draws
    the state of its first rows before every step (rendering costs nothing when there is none).
    """
    batched = BatchedEnv(env, num_episodes, device, seed=seed)
    act = None if policy == "random" else policy.acting_policy(batched, deterministic, training=False)  # type: ignore[attr-defined]
    generator = torch.Generator(device=device).manual_seed(seed + 1)
    obs = batched.reset()
    returns = torch.zeros(num_episodes, device=device)
    lengths = torch.zeros(num_episodes, device=device)
    running = torch.ones(num_episodes, dtype=torch.bool, device=device)
    try:
        for step in range(max_steps):
            if recorder is not None:
                recorder.capture(batched.state)
            action = random_action(env.spec, obs, generator) if act is None else act(obs, generator)[keys.ACTION]
            out = batched.step(action)
            returns += out[keys.REWARD] * running
            lengths += running.float()
            running &= ~(out[keys.TERMINATED] | out[keys.TRUNCATED])
            obs = out.select(*obs.keys(include_nested=False), strict=False)
            obs[keys.IS_FIRST] = out[keys.IS_FIRST]
            if (step + 1) % _CHECK_EVERY == 0 and not bool(running.any()):
                break
    finally:
        if batched.state is not None:
            env.release(batched.state)  # the caller owns ``env`` and closes it; reused across evaluations
    return returns, lengths


def random_action(spec: EnvSpec, obs: TensorDict, generator: torch.Generator) -> torch.Tensor:
    """A uniform-random action per row (legal actions only where the env has masks)."""
    batch = obs.batch_size[0]
    device = obs.device
    if spec.discrete:
        noise = torch.rand(batch, spec.num_actions, generator=generator, device=device)
        mask = obs.get(keys.ACTION_MASK, None)
        if mask is not None:
            noise = noise.masked_fill(~mask, -1.0)
        return noise.argmax(-1)
    low = torch.tensor(spec.action_low, device=device).reshape(spec.action_shape)
    high = torch.tensor(spec.action_high, device=device).reshape(spec.action_shape)
    u = torch.rand(batch, *spec.action_shape, generator=generator, device=device)
    return low + (high - low) * u
