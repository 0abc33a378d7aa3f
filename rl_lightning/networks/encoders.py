"""Observation encoders: whatever the env contract carries under ``obs`` → one float feature vector.

Observations keep their dtype in every store (``uint8``, ``int32``, ``float64``, int64 ``Discrete`` indices); this
is where they are converted, at the start of the network. ``ObsEncoder`` builds one encoder per observation leaf
of an ``EnvSpec`` (the single array, or each key of a ``Dict`` observation, nested keys included) and concatenates
their outputs in the spec's key order, as SB3's ``CombinedExtractor`` does:

* a vector (``Box``) leaf is flattened and cast to float32 (identity-concat into the MLP trunk that follows);
* a ``Discrete(n)`` leaf becomes a one-hot of width ``n``;
* an image leaf (rank-3 ``uint8``, channels-first or -last: ``networks/cnn.py``) gets the CNN the config names
  (``nature`` or ``impala``), or, with ``mlp``, is flattened and scaled to ``[0, 1]`` (``/255``);
* a board leaf (rank-3 planes ``[C, H, W]`` of another dtype, e.g. OpenSpiel's Connect Four ``[3, 6, 7]``) gets the
  convolutional ``board`` encoder when the config names it (``networks/board.py``), else is flattened;
* a game's vector observation may instead get that game's fixed decoding: ``hearts`` turns OpenSpiel Hearts'
  5,088-wide information state into 516 features of the acting seat (``networks/hearts.py``).

The ``encoder`` choice is one name for every image leaf (``"nature"``) or every board leaf (``"board"``), or a
mapping from leaf names (``"/"``-joined nested keys; ``"obs"`` for a single-array observation) to names, unnamed
leaves taking ``mlp``. A CNN named for a leaf that is not an image, for an image smaller than it takes, ``board`` for
a leaf that is not rank-3 planes, and a decoding named for an observation it does not read, are refused in one line.
Only the CNNs have parameters: with ``mlp`` (or a decoding) adding an encoder changes neither a module's
``state_dict`` nor its initialisation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning.errors import ConfigError
from rl_lightning.networks.board import BoardEncoder, is_board
from rl_lightning.networks.cnn import CNNS, MIN_SIZE, PixelEncoder, fits
from rl_lightning.networks.distributions import one_hot
from rl_lightning.networks.hearts import HeartsFeatures

if TYPE_CHECKING:  # networks sit beside envs in the layering: only the spec's type is needed here
    from rl_lightning.envs.base import EnvSpec, ObsLeaf


class FlattenFloat(nn.Module):
    """A ``[..., *shape]`` array → ``[..., prod(shape)]`` float32 (any input dtype)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = tuple(shape)
        self.out_dim = int(torch.Size(self.shape).numel())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.reshape(*obs.shape[: obs.dim() - len(self.shape)], -1).float()


class OneHot(nn.Module):
    """A ``Discrete(n)`` observation ``[...]`` (int64 index) → one-hot ``[..., n]`` float32 (no host sync)."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.out_dim = int(classes)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return one_hot(obs.long(), self.out_dim)


class FlattenPixels(FlattenFloat):
    """A ``uint8`` image ``[..., *shape]`` → ``[..., prod(shape)]`` float32 in ``[0, 1]`` (the ``mlp`` choice)."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return super().forward(obs) / 255.0


#: Fixed decodings of one game's vector observation (no parameters): ``hearts`` reads OpenSpiel Hearts' information
#: state (``networks/hearts.py``).
DECODERS: dict[str, type[nn.Module]] = {"hearts": HeartsFeatures}
#: The convolutional encoder of board planes (``networks/board.py``).
BOARD = "board"
#: What ``encoder`` may name: ``mlp`` (flatten into the MLP trunk), a game decoding, a pixel CNN, or ``board``.
ENCODERS = ("mlp", *DECODERS, *CNNS, BOARD)
EncoderChoice = str | Mapping[str, str]


def is_image(leaf: ObsLeaf) -> bool:
    """Pixels: a rank-3 ``uint8`` observation (``[C, H, W]`` or ``[H, W, C]``)."""
    return leaf.dtype == torch.uint8 and len(leaf.shape) == 3


def leaf_name(key: tuple[str, ...]) -> str:
    """How configs and errors name an observation leaf: ``"/"``-joined nested keys, ``"obs"`` for a single array."""
    return "/".join(key) if key else "obs"


def leaf_encoder(leaf: ObsLeaf, name: str = "mlp", game_params: tuple[tuple[str, Any], ...] = ()) -> nn.Module:
    """The encoder of one observation leaf: ``name`` is ``mlp`` or a CNN (already checked by ``choose_encoders``);
    a game's decoding is built for the game's rules (``EnvSpec.game_params``)."""
    if leaf.classes > 0:
        return OneHot(leaf.classes)
    if name in DECODERS:
        return DECODERS[name].for_rules(dict(game_params))  # type: ignore[attr-defined]
    if name in CNNS:
        return CNNS[name](leaf.shape)
    if name == BOARD:
        return BoardEncoder(leaf.shape)
    return FlattenPixels(leaf.shape) if is_image(leaf) else FlattenFloat(leaf.shape)


def choose_encoders(
    spec: EnvSpec, encoder: EncoderChoice = "mlp", field: str = "model.encoder"
) -> list[tuple[tuple[str, ...], ObsLeaf, str]]:
    """Each observation leaf with the encoder name it gets, or a one-line ``ConfigError`` for a bad choice."""
    leaves = spec.obs_leaves()
    names = {leaf_name(key): key for key, _ in leaves}
    if isinstance(encoder, str) and encoder in DECODERS:
        chosen = {key: encoder if _decodes(encoder, leaf) else "mlp" for key, leaf in leaves}
        if encoder not in chosen.values():
            _refuse_decoder(field, encoder, spec, leaves)
    elif isinstance(encoder, str):
        _check_name(field, encoder)
        if encoder == BOARD:
            chosen = {key: BOARD if _is_board(leaf) else "mlp" for key, leaf in leaves}
            if not any(_is_board(leaf) for _, leaf in leaves):
                raise ConfigError(
                    f"{field}=board is a CNN for board planes (rank-3 [C, H, W], not uint8) and {spec.name} has none "
                    f"({_describe(leaves)}); use {field}=mlp"
                )
        else:
            chosen = {key: encoder if is_image(leaf) else "mlp" for key, leaf in leaves}
        if encoder not in ("mlp", BOARD) and not any(is_image(leaf) for _, leaf in leaves):
            raise ConfigError(
                f"{field}={encoder!r} is a CNN for image observations (rank-3 uint8) and {spec.name} has none "
                f"({_describe(leaves)}); use {field}=mlp"
            )
    else:
        chosen = {key: "mlp" for key, _ in leaves}
        for name, choice in encoder.items():
            _check_name(f"{field}[{name!r}]", choice)
            if name not in names:
                raise ConfigError(
                    f"{field}[{name!r}]: {spec.name} has no observation key {name!r}; keys: {sorted(names)}"
                )
            chosen[names[name]] = choice
    out = []
    for key, leaf in leaves:
        choice = chosen[key]
        if choice in CNNS:
            _check_image(field, key, leaf, choice, leaves)
        elif choice in DECODERS and not _decodes(choice, leaf):
            _refuse_decoder(f"{field}[{leaf_name(key)!r}]", choice, spec, leaves)
        elif choice == BOARD and not _is_board(leaf):
            raise ConfigError(
                f"{field}: observation key {leaf_name(key)!r} ({_shape_dtype(leaf)}) is not board planes, so the board "
                "encoder cannot take it; board takes rank-3 [C, H, W] keys that are not uint8 images; give it mlp"
            )
        out.append((key, leaf, choice))
    return out


def _decodes(name: str, leaf: ObsLeaf) -> bool:
    """Whether the decoding ``name`` reads this leaf: a float vector of the shape it decodes."""
    return leaf.classes == 0 and leaf.dtype.is_floating_point and tuple(leaf.shape) == DECODERS[name].in_shape


def _refuse_decoder(field: str, name: str, spec: EnvSpec, leaves: list) -> None:
    shape = DECODERS[name].in_shape
    raise ConfigError(
        f"{field}={name!r} decodes OpenSpiel {name}' information state (a float vector of shape {shape}) and "
        f"{spec.name} has no such observation ({_describe(leaves)}); use env_id open_spiel:{name} or {field}=mlp"
    )


def _check_name(field: str, name: str) -> None:
    if name not in ENCODERS:
        raise ConfigError(f"{field}={name!r} is not an encoder; choose one of {list(ENCODERS)}")


def _check_image(field: str, key: tuple[str, ...], leaf: ObsLeaf, choice: str, leaves: list) -> None:
    what = f"observation key {leaf_name(key)!r} ({_shape_dtype(leaf)})"
    if not is_image(leaf):
        images = [leaf_name(k) for k, lf in leaves if is_image(lf)]
        raise ConfigError(
            f"{field}: {what} is not an image, so the {choice} CNN cannot encode it; CNNs take rank-3 uint8 keys "
            f"(here: {images or 'none'}); give it mlp"
        )
    if not fits(choice, leaf.shape):
        fitting = [name for name in CNNS if fits(name, leaf.shape)] + ["mlp"]
        raise ConfigError(
            f"{field}: {what} is too small for the {choice} CNN (it needs H and W >= {MIN_SIZE[choice]}); "
            f"encoders that fit: {', '.join(fitting)}"
        )


def _is_board(leaf: ObsLeaf) -> bool:
    return is_board(leaf.shape, leaf.dtype, leaf.classes)


def _shape_dtype(leaf: ObsLeaf) -> str:
    dtype = str(leaf.dtype).removeprefix("torch.")
    return f"Discrete({leaf.classes})" if leaf.classes else f"{dtype} {tuple(leaf.shape)}"


def _describe(leaves: list) -> str:
    return ", ".join(f"{leaf_name(key)}: {_shape_dtype(leaf)}" for key, leaf in leaves)


class ObsEncoder(nn.Module):
    """An ``obs`` tensor or TensorDict (``Dict`` observations) → float features ``[..., out_dim]``.

    Args:
        spec: the env's spec; its ``obs_leaves`` decide the per-key encoders and their order.
        encoder: ``mlp``, ``nature`` or ``impala`` for every image leaf, ``board`` for every board leaf, or
            ``{leaf name: choice}``.
        field: the config field named in errors.
    """

    def __init__(self, spec: EnvSpec, encoder: EncoderChoice = "mlp", field: str = "model.encoder") -> None:
        super().__init__()
        chosen = choose_encoders(spec, encoder, field)
        self.keys = [key for key, _, _ in chosen]
        rules = getattr(spec, "game_params", ())  # a spec saved before game_params: the game's defaults
        self.encoders = nn.ModuleList([leaf_encoder(leaf, name, rules) for _, leaf, name in chosen])
        self.out_dim = sum(encoder.out_dim for encoder in self.encoders)

    @property
    def fixed_decoding(self) -> bool:
        """Whether this encoder is a game's fixed decoding and nothing else learnable (no parameters): a row's
        features never change, so PPO decodes each rollout row once per update rather than once per minibatch."""
        decoders = tuple(DECODERS.values())
        return any(isinstance(enc, decoders) for enc in self.encoders) and next(self.parameters(), None) is None

    @property
    def decoded_leaves(self) -> list[str]:
        """The leaves a game's fixed decoding reads (their raw entries: a normaliser must not change them)."""
        decoders = tuple(DECODERS.values())
        return [leaf_name(key) for key, enc in zip(self.keys, self.encoders, strict=True) if isinstance(enc, decoders)]

    def stage(self, obs: torch.Tensor | TensorDict) -> torch.Tensor | TensorDict:
        """A flat batch of observations with each image leaf laid out as its CNN reads it (``PixelEncoder.stage``),
        the same values: done once per update rather than once per minibatch. Other leaves are returned as they are."""
        staged = [(key, enc.stage(obs if key == () else obs[key])) for key, enc in zip(self.keys, self.encoders,
                  strict=True) if isinstance(enc, PixelEncoder)]  # fmt: skip
        if not staged:
            return obs
        if staged[0][0] == ():
            return staged[0][1]
        obs = obs.copy()  # a shallow copy: the rollout's own leaves stay as they are
        for key, leaf in staged:
            obs[key] = leaf
        return obs

    def forward(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        parts = [enc(obs if key == () else obs[key]) for key, enc in zip(self.keys, self.encoders, strict=True)]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
