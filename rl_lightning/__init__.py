"""rl_lightning: a PyTorch Lightning trainer for reinforcement learning."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Policy", "load_policy"]


def __getattr__(name: str) -> Any:
    """``rl_lightning.load_policy`` / ``rl_lightning.Policy``, imported on first use (they pull in the algorithms)."""
    if name in __all__:
        from rl_lightning import inference

        return getattr(inference, name)
    raise AttributeError(f"module 'rl_lightning' has no attribute {name!r}")
