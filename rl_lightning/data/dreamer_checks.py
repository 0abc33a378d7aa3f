"""Settings ``DreamerDataModule`` refuses before any env exists: an engine the device or the actors rule out, and a
budget that could never sample a batch or never end the prefill."""

from __future__ import annotations

import torch

from rl_lightning.errors import ConfigError


def check_engine(engine: str, num_actors: int, device: torch.device, safety_margin: int, rollout_length: int) -> None:
    """The ``cuda_async`` engine needs a CUDA device, no actor processes, and a safety margin that covers a window."""
    if num_actors and engine == "cuda_async":
        raise ConfigError(
            f"data.engine='cuda_async' overlaps acting and learning on CUDA streams and data.num_actors="
            f"{num_actors} in processes: choose one (engine: auto with actors)"
        )
    if engine == "cuda_async" and device.type != "cuda":
        raise ConfigError(f"data.engine='cuda_async' needs a CUDA device, got {device}; use 'cpu' or 'auto'")
    if device.type == "cuda" and engine != "cpu" and safety_margin < rollout_length:
        raise ConfigError(
            f"data.safety_margin={safety_margin} is below data.rollout_length={rollout_length}: "
            "with the cuda_async engine a running actor window overwrites that many of the oldest rows "
            "while the learner samples; raise safety_margin to at least rollout_length"
        )


def check_budget(
    total_env_steps: int, num_envs: int, world_size: int, min_ready_steps: int, learning_starts: int
) -> None:
    """Each env must tick at least ``min_ready_steps`` times, and the prefill must end before the budget does."""
    per_env_budget = -(-total_env_steps // (num_envs * world_size))
    if per_env_budget < min_ready_steps:
        raise ConfigError(
            f"data.total_env_steps={total_env_steps} gives each env only {per_env_budget} ticks, fewer "
            f"than data.min_ready_steps={min_ready_steps}: no batch could ever be sampled; raise "
            "total_env_steps or lower sequence_length"
        )
    if learning_starts >= total_env_steps:
        raise ConfigError(
            f"data.learning_starts={learning_starts} is not below data.total_env_steps="
            f"{total_env_steps}: training would never start; lower learning_starts"
        )
