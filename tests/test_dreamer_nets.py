"""DreamerV3 building blocks: size presets, heads, vector and image encoders/decoders (dreamer.md §2, §8)."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.errors import ConfigError
from rl_lightning.networks.distributions import symlog
from rl_lightning.networks.dreamer_nets import (
    DREAMER_SIZES,
    CNNDecoder,
    CNNEncoder,
    Head,
    MLPDecoder,
    MLPEncoder,
    dreamer_size,
    make_norm,
    mlp_trunk,
)


def test_preset_lookup() -> None:
    assert {"tiny", "XS", "S", "1M", "12M"} <= set(DREAMER_SIZES)
    tiny = dreamer_size("tiny")
    assert (tiny.deter, tiny.hidden, tiny.stoch, tiny.classes, tiny.blocks) == (32, 32, 4, 4, 1)
    twelve = dreamer_size("12M")
    assert (twelve.deter, twelve.hidden, twelve.stoch, twelve.classes, twelve.cnn_depth) == (2048, 256, 32, 16, 16)
    assert twelve.blocks == 8
    assert dreamer_size("S").mlp_layers == 2
    medium = dreamer_size("M")  # sheeprl's dreamer_v3_M: GRU 1024, dense 640, 3 MLP layers, CNN multiplier 48
    assert (medium.deter, medium.hidden, medium.mlp_layers, medium.cnn_depth, medium.blocks) == (1024, 640, 3, 48, 1)
    for size in DREAMER_SIZES.values():
        assert size.deter % size.blocks == 0


def test_unknown_preset_lists_valid_names() -> None:
    with pytest.raises(ConfigError, match=r"'huge'.*tiny.*12M"):
        dreamer_size("huge")


def test_norm_choices() -> None:
    rms = make_norm("rms", 8)
    assert isinstance(rms, torch.nn.RMSNorm)
    assert not any("bias" in name for name, _ in rms.named_parameters())
    layer = make_norm("layer", 8)
    assert isinstance(layer, torch.nn.LayerNorm)
    assert layer.eps == 1e-3
    with pytest.raises(ConfigError, match="norm='batch'"):
        make_norm("batch", 8)


def test_mlp_trunk_layout() -> None:
    trunk = mlp_trunk(5, 7, 2, "rms")
    kinds = [type(m).__name__ for m in trunk]
    assert kinds == ["Linear", "RMSNorm", "SiLU"] * 2
    assert trunk[0].bias is None
    assert trunk(torch.randn(3, 4, 5)).shape == (3, 4, 7)


@pytest.mark.parametrize("layers", [0, 1, 3])
def test_zero_outscale_head_outputs_exactly_zero(layers: int) -> None:
    head = Head(12, 255, 16, layers, outscale=0.0)
    out = head(torch.randn(4, 2, 12) * 100.0)
    assert out.shape == (4, 2, 255)
    assert torch.equal(out, torch.zeros_like(out))
    small = Head(12, 3, 16, 1, outscale=0.01)
    assert 0 < small.out.weight.abs().max() < 0.01


def test_mlp_encoder_applies_symlog() -> None:
    encoder = MLPEncoder(4, 8, 1, symlog_inputs=True)
    obs = torch.tensor([[1e4, -300.0, 0.5, 0.0]])
    assert torch.allclose(encoder(obs), encoder.trunk(symlog(obs)))
    plain = MLPEncoder(4, 8, 1, symlog_inputs=False)
    assert torch.allclose(plain(obs), plain.trunk(obs))
    assert encoder.out_dim == 8
    assert MLPEncoder(4, 8, 0).out_dim == 4


def test_vector_encoder_decoder_shapes() -> None:
    encoder = MLPEncoder(6, 16, 2)
    decoder = MLPDecoder(40, 6, 16, 2)
    assert encoder(torch.randn(5, 3, 6)).shape == (5, 3, 16)
    assert decoder(torch.randn(5, 3, 40)).shape == (5, 3, 6)


@pytest.mark.parametrize(("shape", "out_dim"), [((3, 64, 64), 4 * 4 * 16), ((1, 16, 16), 3 * 4 * 16)])
def test_image_encoder_decoder_round_trip_shapes(shape: tuple[int, int, int], out_dim: int) -> None:
    encoder = CNNEncoder(shape, depth=4)
    assert encoder.out_dim == out_dim
    images = torch.randint(0, 256, (2, 3, *shape), dtype=torch.uint8)
    embed = encoder(images)
    assert embed.shape == (2, 3, out_dim)
    assert torch.allclose(encoder(images.float()), embed)
    decoder = CNNDecoder(out_dim, shape, depth=4)
    recon = decoder(embed)
    assert recon.shape == (2, 3, *shape)
    assert recon.min() >= 0.0
    assert recon.max() <= 1.0


def test_image_encoder_input_scaling() -> None:
    """x/255 − 0.5: a mid-grey image enters the first conv as (almost) zeros."""
    encoder = CNNEncoder((1, 8, 8), depth=2)
    seen: list[torch.Tensor] = []
    encoder.stages[0].register_forward_hook(lambda _m, args, _out: seen.append(args[0]))
    encoder(torch.full((1, 1, 8, 8), 255.0))
    assert torch.allclose(seen[0], torch.full((1, 1, 8, 8), 0.5))


@pytest.mark.parametrize("shape", [(3, 64, 32), (3, 12, 12), (3, 4, 4), (64, 64)])
def test_bad_image_shapes_raise(shape: tuple[int, ...]) -> None:
    with pytest.raises(ConfigError, match="obs_shape"):
        CNNEncoder(shape, depth=4)
    with pytest.raises(ConfigError, match="obs_shape"):
        CNNDecoder(16, shape, depth=4)
