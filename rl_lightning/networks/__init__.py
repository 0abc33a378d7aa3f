"""Network builders and action distributions."""

from rl_lightning.networks.dreamer_nets import (
    DREAMER_SIZES,
    CNNDecoder,
    CNNEncoder,
    DreamerSize,
    Head,
    MLPDecoder,
    MLPEncoder,
    dreamer_size,
    mlp_trunk,
)
from rl_lightning.networks.mlp import flat_size, mlp
from rl_lightning.networks.rssm import RSSM, BlockGRUCell, BlockLinear

__all__ = [
    "DREAMER_SIZES",
    "RSSM",
    "BlockGRUCell",
    "BlockLinear",
    "CNNDecoder",
    "CNNEncoder",
    "DreamerSize",
    "Head",
    "MLPDecoder",
    "MLPEncoder",
    "dreamer_size",
    "flat_size",
    "mlp",
    "mlp_trunk",
]
