"""Policy revisions: which weights produced which data, and which algorithm wrote a checkpoint (DESIGN.md §4)."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
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
    """

    version: int
    parent: int
    family: str
    digest: str

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


def check_family(checkpoint: dict[str, Any], family: str, source: str = "checkpoint") -> None:
    """Raise ``ValueError`` if ``checkpoint`` was written by another algorithm family than ``family``."""
    revision = checkpoint.get(REVISION_KEY)
    if revision is None:
        raise ConfigError(
            f"{source}: has no '{REVISION_KEY}' entry, so it was not written by rl_lightning; "
            f"pass a checkpoint saved by a '{family}' run"
        )
    if revision.get("family") != family:
        raise ConfigError(
            f"{source}: was written by algorithm family '{revision.get('family')}', but the model is '{family}'; "
            f"resume with the same model class_path or pass a '{family}' checkpoint"
        )
