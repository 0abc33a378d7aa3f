"""rl_lightning: a PyTorch Lightning trainer for reinforcement learning."""

__version__ = "0.1.0"
