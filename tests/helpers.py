"""Small builders for fast PPO runs in tests."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from rl_lightning.algos import PPO
from rl_lightning.data import OnPolicyDataModule
from rl_lightning.envs import CartPole


def tiny_ppo(env: Any = None, num_envs: int = 4, num_steps: int = 16, total_env_steps: int = 256, **model_kwargs: Any):
    """A tiny PPO and its datamodule (4 envs × 16 steps = 64 transitions per update by default)."""
    datamodule = OnPolicyDataModule(
        env or CartPole(), num_envs=num_envs, num_steps=num_steps, total_env_steps=total_env_steps
    )
    kwargs = {"hidden_sizes": (16,), "update_epochs": 2, "num_minibatches": 2, **model_kwargs}
    return PPO(env_spec=datamodule.env_spec, **kwargs), datamodule


def trainer(tmp_path: Any, callbacks: list | None = None, **kwargs: Any) -> pl.Trainer:
    defaults = {
        "default_root_dir": str(tmp_path),
        "max_epochs": -1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": 1,
        "accelerator": "cpu",
        "devices": 1,
        "callbacks": callbacks or [],
    }
    defaults.update(kwargs)
    return pl.Trainer(**defaults)


def tiny_spo(env: Any = None, num_envs: int = 4, rollout_length: int = 8, total_env_steps: int = 64, **kwargs: Any):
    """A tiny SPO and its replay datamodule (4 envs × 8 steps = 32 env steps per update; 2 gradient steps each)."""
    from rl_lightning.algos import SPO
    from rl_lightning.data import ReplayDataModule

    data_keys = {"buffer_size", "batch_size", "sequence_length", "gradient_steps", "learning_starts", "save_replay",
                 "check_env"}  # fmt: skip
    data_kwargs = {"buffer_size": 256, "batch_size": 4, "sequence_length": 4, "gradient_steps": 2}
    data_kwargs.update({k: v for k, v in kwargs.items() if k in data_keys})
    datamodule = ReplayDataModule(
        env or CartPole(), num_envs=num_envs, rollout_length=rollout_length, total_env_steps=total_env_steps,
        **data_kwargs,
    )  # fmt: skip
    model_kwargs = {"hidden_sizes": (16,), "num_particles": 4, "search_depth": 2, "resample_period": 2}
    model_kwargs.update({k: v for k, v in kwargs.items() if k not in data_keys})
    return SPO(env_spec=datamodule.env_spec, **model_kwargs), datamodule


DREAMER_DATA_KEYS = {
    "buffer_size", "batch_size", "sequence_length", "replay_ratio", "learning_starts", "pretrain_steps",
    "commit_stride", "safety_margin", "min_ready_steps", "save_replay", "check_env", "engine", "device", "seed",
}  # fmt: skip


def tiny_dreamer(env: Any = None, num_envs: int = 2, rollout_length: int = 4, total_env_steps: int = 64, **kwargs: Any):
    """A tiny DreamerV3 (``size=tiny``, horizon 3) and its datamodule: 2 envs × 4 ticks per cycle, ratio 0.25."""
    from rl_lightning.algos import DreamerV3
    from rl_lightning.data import DreamerDataModule

    data_kwargs = {"buffer_size": 256, "batch_size": 2, "sequence_length": 4, "replay_ratio": 0.25,
                   "learning_starts": 16, "commit_stride": 2}  # fmt: skip
    data_kwargs.update({k: v for k, v in kwargs.items() if k in DREAMER_DATA_KEYS})
    datamodule = DreamerDataModule(
        env or CartPole(), num_envs=num_envs, rollout_length=rollout_length, total_env_steps=total_env_steps,
        **data_kwargs,
    )  # fmt: skip
    model_kwargs = {"size": "tiny", "horizon": 3, "bins": 15, "warmup_steps": 0, "lr": 1e-3}
    model_kwargs.update({k: v for k, v in kwargs.items() if k not in DREAMER_DATA_KEYS})
    return DreamerV3(env_spec=datamodule.env_spec, **model_kwargs), datamodule
