"""Policy revisions: which weights produced which data, and which algorithm wrote a checkpoint."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rl_lightning.errors import ConfigError

REVISION_KEY = "policy_revision"


@dataclass(frozen=True)
class PolicyRevision:
    """Identity of a set of policy weights.

    Attributes:
        version: the module's ``policy_version`` when saved (bumped on every weight change the actor sees).
        parent: the version this run resumed from (``-1`` for a fresh run).
        family: algorithm family (``"ppo"``, ``"spo"``, ``"dreamer"``); a checkpoint loads only into its family.
        digest: sha256 over the module's parameters and buffers, in ``state_dict`` order.
        parent_digest: the digest of the weights a fresh run started from (``init_weights``: a BC or PPO
            checkpoint); ``""`` when it started from its own initialisation.
    """

    version: int
    parent: int
    family: str
    digest: str
    parent_digest: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def weights_digest(module: nn.Module) -> str:
    """sha256 of every tensor in ``module.state_dict()`` (names, dtypes, shapes and bytes)."""
    sha = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)  # 0-dim tensors cannot be viewed as bytes
        sha.update(f"{name}:{flat.dtype}:{tuple(flat.shape)}".encode())
        sha.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return sha.hexdigest()


def check_family(
    checkpoint: dict[str, Any], family: str, source: str = "checkpoint", accepted: tuple[str, ...] = ()
) -> None:
    """Raise ``ConfigError`` if ``checkpoint`` was written by another algorithm family than ``family`` (or one of
    ``accepted``: families whose weights the model also plays, e.g. a BC clone evaluated as a PPO policy)."""
    revision = checkpoint.get(REVISION_KEY)
    if revision is None:
        raise ConfigError(
            f"{source}: has no '{REVISION_KEY}' entry, so it was not written by rl_lightning; "
            f"pass a checkpoint saved by a '{family}' run"
        )
    if revision.get("family") not in (family, *accepted):
        raise ConfigError(
            f"{source}: was written by algorithm family '{revision.get('family')}', but the model is '{family}'; "
            f"resume with the same model class_path or pass a '{family}' checkpoint"
        )


def read_checkpoint(path: str, source: str = "ckpt_path") -> dict[str, Any]:
    """Load a Lightning checkpoint on CPU, or raise a one-line ``ConfigError`` naming the file and the fix."""
    where = f"{source}={path!r}"
    if not Path(path).is_file():
        raise ConfigError(f"{where}: no such file; pass an existing .ckpt (or 'last' to take the newest last.ckpt)")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 - every way a damaged file fails to unpickle is the same user error
        reason = " ".join(str(err).split()).split(". ")[0].rstrip(".") or type(err).__name__
        raise ConfigError(
            f"{where}: cannot be read as a checkpoint ({reason}); the file is truncated or not a .ckpt: "
            "pass an intact checkpoint, e.g. an earlier one from the run's checkpoints/ folder"
        ) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(
            f"{where}: is not a Lightning checkpoint (no 'state_dict'); pass a .ckpt an rl-lightning run saved"
        )
    return checkpoint


def _spec_shape(spec: Any) -> dict[str, Any]:
    keys = ("obs_shape", "obs_dtype", "discrete", "num_actions", "action_shape", "has_action_mask")
    return {key: getattr(spec, key, None) for key in keys}


def _describe(spec: Any) -> str:
    actions = f"{spec.num_actions} discrete actions" if spec.discrete else f"actions {tuple(spec.action_shape)}"
    mask = ", masked" if spec.has_action_mask else ""
    return f"'{spec.name}' (obs {tuple(spec.obs_shape)} {spec.obs_dtype}, {actions}{mask})"


def check_env_spec(checkpoint: dict[str, Any], spec: Any, source: str = "checkpoint") -> None:
    """Raise ``ConfigError`` if ``checkpoint`` was trained on an env with other observation or action shapes."""
    saved = checkpoint.get("hyper_parameters", {}).get("env_spec")
    if saved is None or _spec_shape(saved) == _spec_shape(spec):
        return
    raise ConfigError(
        f"{source}: was trained on env {_describe(saved)}, but data.env gives {_describe(spec)}; "
        "use the env the checkpoint was trained on, or start a fresh run without --ckpt_path"
    )


def check_weights_fit(checkpoint: dict[str, Any], module: nn.Module, source: str = "checkpoint") -> None:
    """Raise ``ConfigError`` if the checkpoint's weights do not load into ``module`` (other network settings)."""
    saved = checkpoint["state_dict"]
    own = module.state_dict()
    missing = sorted(set(own) - set(saved))
    extra = sorted(set(saved) - set(own))
    wrong = [k for k in own if k in saved and tuple(saved[k].shape) != tuple(own[k].shape)]
    if not (missing or extra or wrong):
        return
    if wrong:
        detail = f"'{wrong[0]}' is {tuple(saved[wrong[0]].shape)} there but {tuple(own[wrong[0]].shape)} in the model"
    else:
        detail = f"weights missing from it: {missing[:3]}" if missing else f"weights the model lacks: {extra[:3]}"
    raise ConfigError(
        f"{source}: its weights do not fit the configured model ({detail}); "
        "use the model settings (e.g. model.init_args.hidden_sizes) the checkpoint was trained with"
    )


#: The env spec fields a network's shapes and seats depend on: a checkpoint's network loads, or plays a seat, only in
#: an env that agrees on each of them.
NETWORK_SPEC_FIELDS = ("obs_shape", "obs_dtype", "discrete", "num_actions", "action_shape", "has_action_mask",
                       "num_seats")  # fmt: skip


def check_same_env(saved: Any, spec: Any, where: str, fix: str, here: str = "data.env gives") -> None:
    """Raise a one-line ``ConfigError`` naming both envs when ``saved`` (the env spec a checkpoint was trained on)
    differs from ``spec`` in a field its network depends on (``NETWORK_SPEC_FIELDS``); ``None`` (a checkpoint that
    kept no spec) passes. ``where`` names the setting, ``here`` says what plays ``spec``, ``fix`` is the way out."""
    if saved is None:
        return
    for name in NETWORK_SPEC_FIELDS:
        theirs, ours = getattr(saved, name, None), getattr(spec, name, None)
        if theirs != ours:
            raise ConfigError(f"{where}: was trained on {saved.name} ({name}={theirs}) but {here} {spec.name} "
                              f"({name}={ours}); {fix}")  # fmt: skip


def check_checkpoint_plays(path: str, spec: Any, field: str, here: str = "data.env gives") -> None:
    """Refuse, in one line before any env step, the checkpoint file ``path`` as a player of ``spec``'s game when it
    was trained on another env (its network could not read this game's observations). ``field`` names the setting
    (``data.seats[1]``); a missing or unreadable file is refused by ``read_checkpoint``."""
    checkpoint = read_checkpoint(path, source=field)
    saved = checkpoint.get("hyper_parameters", {}).get("env_spec")
    check_same_env(saved, spec, f"{field}={path!r}", f"give a checkpoint of a run on {spec.name}", here)


def constructor_args(hparams: Mapping[str, Any], cls: type | None = None) -> dict[str, Any]:
    """The module's constructor arguments from its ``hparams``, without the CLI's bookkeeping entries.

    Under ``LightningCLI``, ``save_hyperparameters`` also records jsonargparse's ``_class_path`` and
    ``_instantiator``, which no constructor accepts; every key starting with ``_`` is such an entry. With ``cls``,
    only the arguments its ``__init__`` takes (``BC`` and ``AlphaZero`` save PPO's whole set beside their own).
    """
    args = {k: v for k, v in hparams.items() if not k.startswith("_")}
    if cls is None:
        return args
    accepted = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in args.items() if k in accepted}
