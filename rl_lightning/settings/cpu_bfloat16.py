"""float32 instead of bfloat16 where ``trainer.precision`` asks for bfloat16 on a CPU that would only emulate it.

bfloat16 pays on a CPU with native bfloat16 arithmetic (AVX512-BF16, AMX): a Nature-CNN minibatch step runs ~1.5x
faster than in float32 there. Without it oneDNN and ATen convert to float32 and back around every kernel, and the
same fit runs slower than in float32: the user (or a bundled config, which ships bfloat16 where it pays) asked for
speed and would get a slowdown. The CLI runs such a fit in ``32-true`` and says so in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.accelerators import CPUAccelerator

#: ``/proc/cpuinfo`` flags that mean native bfloat16 arithmetic.
NATIVE_BFLOAT16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    """The CPU's feature flags from ``/proc/cpuinfo`` (Linux), or ``None`` where it cannot be read."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return None


def runs_on_cpu(accelerator: Any) -> bool:
    """Whether a ``trainer.accelerator`` setting puts the run on the CPU (``auto`` does without a GPU)."""
    if isinstance(accelerator, CPUAccelerator):
        return True
    if not isinstance(accelerator, str):
        return False
    if accelerator == "auto":
        return not torch.cuda.is_available() and not torch.backends.mps.is_available()
    return accelerator == "cpu"


def float32_fallback(config: dict[str, Any], flags: set[str] | None = None) -> str | None:
    """Set ``config["precision"]`` (the Trainer's settings) to ``32-true`` where it asks for bfloat16 on a CPU without
    native bfloat16, and return the one line that says so; ``None`` (and ``config`` untouched) otherwise: another
    precision or accelerator, a native CPU, or flags that cannot be read (no guess)."""
    precision = str(config.get("precision") or "")
    if "bf16" not in precision or not runs_on_cpu(config.get("accelerator", "auto")):
        return None
    flags = cpu_flags() if flags is None else flags
    if flags is None or flags & NATIVE_BFLOAT16_FLAGS:
        return None
    config["precision"] = "32-true"
    return (
        f"trainer.precision={precision} on a CPU without native bfloat16 (no avx512_bf16 or amx_bf16 in "
        "/proc/cpuinfo), where bfloat16 is emulated and runs slower than float32: this run uses 32-true"
    )
