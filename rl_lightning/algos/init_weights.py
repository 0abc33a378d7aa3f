"""``init_weights``: start a run from another run's network weights (BC or PPO), not a resume.

Only the module's ``state_dict`` is taken (network weights and the observation normaliser's statistics, which are
buffers): counters, optimiser state, generator, env steps and the league all start from zero, as in a fresh run.
The parent's weight digest is kept as ``parent_digest`` in the new run's lineage (``PolicyRevision``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from rl_lightning.errors import ConfigError
from rl_lightning.lineage import REVISION_KEY, check_same_env, read_checkpoint

_MAGNET_PREFIX = "magnet."


def load_init_weights(
    module: nn.Module, path: str, families: tuple[str, ...], field: str = "model.init_weights"
) -> str:
    """Copy the weights of the checkpoint at ``path`` into ``module``; returns the checkpoint's weight digest.

    Raises:
        ConfigError: one line, before any weight changes: no such file, an unreadable file, a checkpoint of another
            algorithm family than ``families``, of another env spec (shapes, actions, seats), or whose tensors do
            not fit the module (the first parameter missing, extra or of another shape is named).
    """
    where = f"{field}={path!r}"
    if not Path(path).is_file():
        raise ConfigError(f"{where}: no such file; pass a .ckpt of a BC or PPO run (e.g. its checkpoints/last.ckpt)")
    checkpoint = read_checkpoint(path, source=field)
    family = (checkpoint.get(REVISION_KEY) or {}).get("family")
    if family not in families:
        raise ConfigError(f"{where}: was written by algorithm family {family!r}; initial weights come from a "
                          f"{' or '.join(families)} checkpoint")  # fmt: skip
    saved_spec = checkpoint.get("hyper_parameters", {}).get("env_spec")
    check_same_env(saved_spec, module.env_spec, where, "start from a checkpoint of this env")
    # A magnet's buffers (``model.magnet``) are the writing run's regulariser, not its policy: the module's own
    # magnet, if any, is built from the loaded weights afterwards.
    saved = {name: t for name, t in checkpoint["state_dict"].items() if not name.startswith(_MAGNET_PREFIX)}
    own = module.state_dict()
    mismatch = _first_mismatch(saved, own)
    if mismatch:
        raise ConfigError(f"{where}: its weights do not fit the model ({mismatch}); use the network settings "
                          "(hidden_sizes, encoder, normalize_obs, ...) of the run that wrote it")  # fmt: skip
    module.load_state_dict(saved, strict=True)
    return str(checkpoint[REVISION_KEY].get("digest", ""))


def _first_mismatch(saved: dict[str, Any], own: dict[str, Any]) -> str:
    """The first tensor, in the module's order, that the checkpoint lacks or holds in another shape; then extras."""
    for name, tensor in own.items():
        if name not in saved:
            return f"the checkpoint has no {name!r}"
        if tuple(saved[name].shape) != tuple(tensor.shape):
            return f"{name!r} is {tuple(saved[name].shape)} there but {tuple(tensor.shape)} here"
    extra = [name for name in saved if name not in own]
    return f"the model has no {extra[0]!r}" if extra else ""
