"""``rl-lightning export``: a trained policy as a file that runs outside the trainer (ONNX or ``torch.export``).

``export_policy(ckpt_path, "onnx")`` loads the checkpoint as ``load_policy`` does and writes the graph that acts as
that ``Policy`` does, from raw observations to the env's action (``policy_graph``'s docstring lists the inputs and
outputs); ``docs/guides/inference-export.md`` ("Exporting a policy") shows how a game or a robot runs it with
``onnxruntime`` alone.
"""

from __future__ import annotations

import os
from pathlib import Path

from rl_lightning.algos import PPO, SPO, DreamerV3, RecurrentPPO
from rl_lightning.errors import ConfigError
from rl_lightning.export.policy_graph import MASK_DTYPES, PolicyGraph, PPOGraph, SPOPriorGraph, TensorSpec
from rl_lightning.export.recurrent import DreamerPlayerGraph, RecurrentPPOGraph
from rl_lightning.export.writers import write
from rl_lightning.inference import Policy, load_policy

#: format → the default file suffix.
FORMATS = {"onnx": ".onnx", "torch_export": ".pt2"}

__all__ = ["FORMATS", "MASK_DTYPES", "PolicyGraph", "TensorSpec", "export_policy", "policy_graph"]


def export_policy(
    ckpt_path: str | Path,
    fmt: str = "onnx",
    out: str | Path | None = None,
    stochastic: bool = False,
    mask_dtype: str = "bool",
) -> tuple[Path, PolicyGraph]:
    """Export a checkpoint's policy; returns the file written and the graph (its ``inputs``/``outputs``).

    Args:
        ckpt_path: a ``.ckpt`` from ``rl-lightning fit`` (PPO, SPO: its prior, DreamerV3: its player).
        fmt: ``onnx`` or ``torch_export``.
        out: the file to write; default: the checkpoint's path with the format's suffix.
        stochastic: sample with a ``noise`` input instead of the deterministic action.
        mask_dtype: dtype of the ``action_mask`` input, ``bool`` or ``float32``.

    Raises:
        ConfigError: bad arguments, an unreadable checkpoint or one the format cannot express; nothing is written.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"--format={fmt!r} is not an export format; choose one of {sorted(FORMATS)}")
    if mask_dtype not in MASK_DTYPES:
        raise ConfigError(f"--mask_dtype={mask_dtype!r} is not a mask dtype; choose one of {sorted(MASK_DTYPES)}")
    ckpt = Path(ckpt_path)
    if not ckpt.is_file():
        raise ConfigError(f"--ckpt_path={str(ckpt_path)!r}: no such file; pass a .ckpt that rl-lightning fit saved")
    target = Path(out) if out is not None else ckpt.with_suffix(FORMATS[fmt])
    _check_writable(target)
    graph = policy_graph(load_policy(str(ckpt), deterministic=not stochastic), mask_dtype, stochastic)
    write(graph, fmt, target)
    return target, graph


def _check_writable(target: Path) -> None:
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise ConfigError(f"--out={str(target)!r} is a directory; name the file to write, e.g. {target / 'policy'}")
    if not parent.is_dir():
        raise ConfigError(f"--out={str(target)!r}: directory {str(parent)!r} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise ConfigError(f"--out={str(target)!r} is not writable; choose a path you can write")


def policy_graph(policy: Policy, mask_dtype: str = "bool", stochastic: bool = False) -> PolicyGraph:
    """The ``PolicyGraph`` of a loaded policy (in eval mode; its weights are shared, not copied).

    Raises:
        ConfigError: an algorithm or option the export does not cover, in one line naming it.
    """
    if mask_dtype not in MASK_DTYPES:
        raise ConfigError(f"--mask_dtype={mask_dtype!r} is not a mask dtype; choose one of {sorted(MASK_DTYPES)}")
    module = policy.module
    if isinstance(module, RecurrentPPO):  # before PPO: a subclass
        if stochastic:
            raise ConfigError("--stochastic: RecurrentPPO samples without a noise input; export without --stochastic "
                              "(the deterministic action)")  # fmt: skip
        return RecurrentPPOGraph(module, mask_dtype).eval()
    if isinstance(module, DreamerV3):
        if stochastic:
            raise ConfigError("--stochastic: DreamerV3's player samples its latents as well as its actions, which the "
                              "export has no noise inputs for; export without --stochastic (its modes)")  # fmt: skip
        return DreamerPlayerGraph(module).eval()
    if isinstance(module, SPO):
        return SPOPriorGraph(module, mask_dtype, stochastic).eval()
    if isinstance(module, PPO):
        return PPOGraph(module, mask_dtype, stochastic).eval()
    raise ConfigError(
        f"export: {type(module).__name__} policies cannot be exported; PPO, RecurrentPPO, SPO and DreamerV3 can"
    )
