"""DreamerV3 building blocks: size presets, norms, MLP trunks, heads, vector and image encoders/decoders.

Everything follows dreamer.md §2 (world model components) and §8 (model sizes). Two generations exist: v1 (arXiv
2301.04104v1: LayerNorm eps 1e-3, strided encoder) and 2024 (arXiv v2 / Nature: RMSNorm with no additive offset,
conv + max-pool encoder, upsample + conv decoder with a sigmoid output). The image nets here use the 2024 layout for
both; the norm is a constructor argument (``"rms"`` for 2024, ``"layer"`` for v1).

Tensors may carry any leading dims (time-major ``[T, B, ...]`` in this package); only the trailing feature (or
``[C, H, W]`` image) dims are consumed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from rl_lightning.errors import ConfigError
from rl_lightning.networks.distributions import symlog

NORMS = ("rms", "layer")
ACTS = ("silu",)
_RMS_EPS = 1e-4  # danijar 2024 ``nets.Norm`` default
_LAYER_EPS = 1e-3  # v1 / sheeprl LayerNorm
_TRUNC_STD_CORRECTION = 0.87962566103423978  # std of a unit normal truncated to ±2σ


@dataclass(frozen=True)
class DreamerSize:
    """One DreamerV3 model size (dreamer.md §8).

    Attributes:
        deter: GRU (deterministic) state width.
        hidden: MLP width ("units"): RSSM projections, prior/posterior MLPs, encoder/decoder/actor/critic MLPs.
        stoch: number of categorical latents.
        classes: classes per categorical latent.
        cnn_depth: CNN channel multiplier; stage ``i`` has ``cnn_depth · (2, 3, 4, 4, …)[i]`` channels.
        mlp_layers: hidden layers of the vector encoder/decoder, actor and critic.
        head_layers: hidden layers of the reward and continue heads.
        blocks: GRU blocks of the block-diagonal recurrent core (1 = a plain GRU, v1).
    """

    deter: int
    hidden: int
    stoch: int
    classes: int
    cnn_depth: int
    mlp_layers: int
    head_layers: int
    blocks: int


DREAMER_SIZES: dict[str, DreamerSize] = {
    # Debug/test size: everything tiny so a CPU update takes milliseconds.
    "tiny": DreamerSize(deter=32, hidden=32, stoch=4, classes=4, cnn_depth=4, mlp_layers=1, head_layers=1, blocks=1),
    # v1 sizes as in sheeprl's dreamer_v3_{XS,S,M}.yaml (32×32 latents, heads as deep as the MLPs).
    "XS": DreamerSize(deter=256, hidden=256, stoch=32, classes=32, cnn_depth=24, mlp_layers=1, head_layers=1, blocks=1),
    "S": DreamerSize(deter=512, hidden=512, stoch=32, classes=32, cnn_depth=32, mlp_layers=2, head_layers=2, blocks=1),
    "M": DreamerSize(deter=1024, hidden=640, stoch=32, classes=32, cnn_depth=48, mlp_layers=3, head_layers=3, blocks=1),
    # 2024 sizes (configs.yaml): 8 GRU blocks, classes = CNN depth = hidden/16, 1-layer reward/continue heads.
    "1M": DreamerSize(deter=512, hidden=64, stoch=32, classes=4, cnn_depth=4, mlp_layers=3, head_layers=1, blocks=8),
    "12M": DreamerSize(
        deter=2048, hidden=256, stoch=32, classes=16, cnn_depth=16, mlp_layers=3, head_layers=1, blocks=8
    ),
    "25M": DreamerSize(
        deter=3072, hidden=384, stoch=32, classes=24, cnn_depth=24, mlp_layers=3, head_layers=1, blocks=8
    ),
}


def dreamer_size(name: str) -> DreamerSize:
    """Look up a preset of :data:`DREAMER_SIZES` by name (case-sensitive: ``"tiny"``, ``"XS"``, ``"1M"``, …)."""
    if name not in DREAMER_SIZES:
        raise ConfigError(f"model.size={name!r} is not a DreamerV3 size: choose one of {list(DREAMER_SIZES)}")
    return DREAMER_SIZES[name]


def check_norm(norm: str) -> None:
    if norm not in NORMS:
        raise ConfigError(f"norm={norm!r} is invalid: choose one of {list(NORMS)} ('rms' 2024, 'layer' v1)")


class _Float32Norm(nn.Module):
    """Normalises in float32 and hands back the input's dtype, as the official code's norms do: under
    ``bf16-mixed`` the statistics stay exact and the scale meets its float32 weight (a no-op in float32)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.float()).to(x.dtype)  # type: ignore[misc]


class RMSNorm(_Float32Norm, nn.RMSNorm):
    """``nn.RMSNorm`` computed in float32."""


class LayerNorm(_Float32Norm, nn.LayerNorm):
    """``nn.LayerNorm`` computed in float32."""


def make_norm(norm: str, dim: int) -> nn.Module:
    """``"rms"``: RMSNorm with a scale and no additive offset (2024); ``"layer"``: LayerNorm eps 1e-3 (v1)."""
    check_norm(norm)
    if norm == "rms":
        return RMSNorm(dim, eps=_RMS_EPS)
    return LayerNorm(dim, eps=_LAYER_EPS)


def make_act(act: str = "silu") -> nn.Module:
    """The activation of every DreamerV3 hidden layer (SiLU in v1 and in the sizes used here)."""
    if act not in ACTS:
        raise ConfigError(f"act={act!r} is invalid: choose one of {list(ACTS)}")
    return nn.SiLU()


def trunc_normal_(weight: torch.Tensor, fan_in: int, scale: float = 1.0) -> torch.Tensor:
    """Variance-scaling init from fan-in (danijar ``trunc_normal``, fan ``in``): std ``scale / √fan_in``.

    ``scale == 0`` gives exact zeros (``outscale: 0.0`` heads).
    """
    with torch.no_grad():
        if scale == 0.0:
            return weight.zero_()
        std = scale / math.sqrt(fan_in) / _TRUNC_STD_CORRECTION
        return nn.init.trunc_normal_(weight, 0.0, std, -2.0 * std, 2.0 * std)


def linear(in_dim: int, out_dim: int, bias: bool = True, outscale: float = 1.0) -> nn.Linear:
    """A ``nn.Linear`` with fan-in truncated-normal weights scaled by ``outscale`` and zero bias."""
    layer = nn.Linear(in_dim, out_dim, bias=bias)
    trunc_normal_(layer.weight, in_dim, outscale)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


def conv2d(in_ch: int, out_ch: int, kernel: int, bias: bool = True) -> nn.Conv2d:
    """A 'same'-padded stride-1 conv with fan-in truncated-normal weights."""
    layer = nn.Conv2d(in_ch, out_ch, kernel, padding=kernel // 2, bias=bias)
    trunc_normal_(layer.weight, in_ch * kernel * kernel)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


def mlp_trunk(in_dim: int, units: int, layers: int, norm: str = "rms", act: str = "silu") -> nn.Sequential:
    """``(Linear without bias → Norm → SiLU) × layers``; the output width is ``units`` (``in_dim`` if no layers)."""
    if layers < 0:
        raise ConfigError(f"layers={layers} is invalid: must be >= 0")
    modules: list[nn.Module] = []
    width = in_dim
    for _ in range(layers):
        modules += [linear(width, units, bias=False), make_norm(norm, units), make_act(act)]
        width = units
    return nn.Sequential(*modules)


def trunk_width(in_dim: int, units: int, layers: int) -> int:
    return units if layers > 0 else in_dim


class ChannelNorm(nn.Module):
    """Applies a feature norm over the channel dim of ``[N, C, H, W]`` maps (per pixel, as danijar's ``Norm``)."""

    def __init__(self, channels: int, norm: str) -> None:
        super().__init__()
        self.norm = make_norm(norm, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.movedim(-3, -1)).movedim(-1, -3)


class Head(nn.Module):
    """MLP trunk + linear output: reward/continue/actor/critic heads and the RSSM's latent logits (dreamer.md §2, §4).

    Args:
        in_dim: input width (usually the RSSM ``feature_dim``).
        out_dim: output width (e.g. 255 two-hot bins, 1 continue logit).
        units: hidden width of the trunk.
        layers: hidden layers of the trunk (0 = a single linear map).
        norm: ``"rms"`` (2024) or ``"layer"`` (v1).
        outscale: scale of the output layer's init; 0.0 zero-initialises its weights and bias so the head starts at
            exactly 0 (reward and value heads), 0.01 for the 2024 policy, 1.0 otherwise.
    """

    def __init__(
        self, in_dim: int, out_dim: int, units: int, layers: int, norm: str = "rms", outscale: float = 1.0
    ) -> None:
        super().__init__()
        self.trunk = mlp_trunk(in_dim, units, layers, norm)
        self.out = linear(trunk_width(in_dim, units, layers), out_dim, outscale=outscale)
        self.out_dim = out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Distributions and losses read float32 logits, also when the trunk runs in bfloat16 (trainer.precision
        # bf16-mixed), as the official code's heads do.
        return self.out(self.trunk(x)).float()


class MLPEncoder(nn.Module):
    """Vector-observation encoder: symlog inputs (dreamer.md §4) → MLP trunk; output width ``out_dim``.

    Args:
        obs_dim: flat observation width.
        units: hidden width.
        layers: hidden layers (v1 XS 1, S 2; 2024 3).
        norm: ``"rms"`` or ``"layer"``.
        symlog_inputs: squash inputs with symlog so large magnitudes do not dominate (True in v1 and 2024).
    """

    def __init__(self, obs_dim: int, units: int, layers: int, norm: str = "rms", symlog_inputs: bool = True) -> None:
        super().__init__()
        self.symlog_inputs = symlog_inputs
        self.trunk = mlp_trunk(obs_dim, units, layers, norm)
        self.out_dim = trunk_width(obs_dim, units, layers)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = symlog(obs) if self.symlog_inputs else obs
        return self.trunk(x)


class MLPDecoder(nn.Module):
    """Vector-observation decoder: feature → MLP → ``obs_dim``; the output predicts ``symlog(obs)`` (``symlog_mse``).

    Args:
        feature_dim: RSSM feature width (``deter + stoch·classes``).
        obs_dim: flat observation width.
        units: hidden width.
        layers: hidden layers.
        norm: ``"rms"`` or ``"layer"``.
    """

    def __init__(self, feature_dim: int, obs_dim: int, units: int, layers: int, norm: str = "rms") -> None:
        super().__init__()
        self.head = Head(feature_dim, obs_dim, units, layers, norm)

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        return self.head(feature)


def _image_stages(obs_shape: Sequence[int], field: str) -> tuple[int, int, int]:
    """Validate ``(C, H, W)`` and return ``(channels, size, stages)`` with ``size / 2**stages == 4``."""
    if len(obs_shape) != 3:
        raise ConfigError(f"{field}={tuple(obs_shape)} is invalid: images must be (C, H, W)")
    channels, height, width = (int(s) for s in obs_shape)
    if height != width or height < 8 or height & (height - 1):
        raise ConfigError(
            f"{field}={tuple(obs_shape)} is invalid: H and W must be equal powers of 2 >= 8 (e.g. 16, 32, 64)"
        )
    return channels, height, int(math.log2(height)) - 2


def cnn_depths(depth: int, stages: int) -> list[int]:
    """Channels per stage: ``depth · (2, 3, 4, 4, 4, …)`` (2024 ``mults: [2, 3, 4, 4]``, extended with 4)."""
    mults = (2, 3, 4)
    return [depth * mults[min(i, len(mults) - 1)] for i in range(stages)]


class CNNEncoder(nn.Module):
    """Image encoder of the 2024 generation (dreamer.md §2): ``x/255 − 0.5`` → stages down to 4×4 → flatten.

    Each stage is a 5×5 stride-1 conv (no bias), a 2×2 max-pool, a channel norm and SiLU (the 2024 layout; v1 used
    k4 s2 strided convs). Stages halve the resolution until it is 4×4, so 64×64 images take 4 stages with
    ``depth · (2, 3, 4, 4)`` channels and 16×16 images 2 stages. Accepts ``uint8`` or float images in [0, 255] with
    any leading dims ``[..., C, H, W]``.

    Args:
        obs_shape: ``(C, H, W)``; H == W, a power of 2 >= 8.
        depth: channel multiplier (``DreamerSize.cnn_depth``).
        norm: ``"rms"`` or ``"layer"``.
        kernel: conv kernel size (5 in 2024).
    """

    def __init__(self, obs_shape: Sequence[int], depth: int, norm: str = "rms", kernel: int = 5) -> None:
        super().__init__()
        channels, _, stages = _image_stages(obs_shape, "obs_shape")
        self.obs_shape = tuple(int(s) for s in obs_shape)
        depths = cnn_depths(depth, stages)
        modules: list[nn.Module] = []
        width = channels
        for out_ch in depths:
            modules += [conv2d(width, out_ch, kernel, bias=False), nn.MaxPool2d(2), ChannelNorm(out_ch, norm)]
            modules.append(make_act())
            width = out_ch
        self.stages = nn.Sequential(*modules)
        self.out_dim = depths[-1] * 4 * 4

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        lead = image.shape[:-3]
        x = image.reshape(-1, *self.obs_shape).to(self.stages[0].weight.dtype) / 255.0 - 0.5
        return self.stages(x).reshape(*lead, self.out_dim)


class CNNDecoder(nn.Module):
    """Image decoder of the 2024 generation (dreamer.md §2): feature → 4×4 map → (upsample ×2, conv) → sigmoid.

    Mirrors :class:`CNNEncoder`: a linear map to ``[depths[-1], 4, 4]`` with norm + SiLU, then per stage a nearest
    ×2 upsample and a 5×5 conv down the encoder's channel list, the last one to ``C`` channels with a **sigmoid**, so
    the output lies in [0, 1] and is compared (elsewhere) with ``x/255``.

    Args:
        feature_dim: RSSM feature width.
        obs_shape: ``(C, H, W)``; H == W, a power of 2 >= 8.
        depth: channel multiplier (``DreamerSize.cnn_depth``).
        norm: ``"rms"`` or ``"layer"``.
        kernel: conv kernel size (5 in 2024).
    """

    def __init__(
        self, feature_dim: int, obs_shape: Sequence[int], depth: int, norm: str = "rms", kernel: int = 5
    ) -> None:
        super().__init__()
        channels, _, stages = _image_stages(obs_shape, "obs_shape")
        self.obs_shape = tuple(int(s) for s in obs_shape)
        depths = cnn_depths(depth, stages)
        self.start_shape = (depths[-1], 4, 4)
        self.space = linear(feature_dim, math.prod(self.start_shape), bias=False)
        modules: list[nn.Module] = [ChannelNorm(depths[-1], norm), make_act()]
        width = depths[-1]
        for out_ch in reversed(depths[:-1]):
            modules += [nn.Upsample(scale_factor=2, mode="nearest"), conv2d(width, out_ch, kernel, bias=False)]
            modules += [ChannelNorm(out_ch, norm), make_act()]
            width = out_ch
        modules += [nn.Upsample(scale_factor=2, mode="nearest"), conv2d(width, channels, kernel), nn.Sigmoid()]
        self.stages = nn.Sequential(*modules)

    def forward(self, feature: torch.Tensor) -> torch.Tensor:
        lead = feature.shape[:-1]
        x = self.space(feature.reshape(-1, feature.shape[-1])).reshape(-1, *self.start_shape)
        return self.stages(x).reshape(*lead, *self.obs_shape).float()
