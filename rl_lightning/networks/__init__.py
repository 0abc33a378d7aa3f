"""Network builders and action distributions."""

from rl_lightning.networks.mlp import flat_size, mlp

__all__ = ["flat_size", "mlp"]
