"""A notice when ``trainer.precision`` asks for bfloat16 on a CPU that would only emulate it.

bfloat16 pays on a CPU with native bfloat16 arithmetic (AVX512-BF16, AMX): a Nature-CNN minibatch step runs ~1.5x
faster than in float32 there. Without it oneDNN and ATen convert to float32 and back around every kernel, and the
same fit runs slower than in float32: the user asked for speed and would get a silent slowdown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def emulated_bfloat16_notice(trainer: Any, flags: set[str] | None = None) -> str | None:
    """One line for a ``bf16`` precision on the CPU accelerator of a CPU without native bfloat16; ``None`` otherwise
    (another precision or accelerator, a native CPU, or flags that cannot be read: no guess)."""
    precision = str(getattr(trainer, "precision", ""))
    if "bf16" not in precision or not isinstance(getattr(trainer, "accelerator", None), CPUAccelerator):
        return None
    flags = cpu_flags() if flags is None else flags
    if flags is None or flags & NATIVE_BFLOAT16_FLAGS:
        return None
    return (
        f"trainer.precision={precision} on a CPU without native bfloat16 (no avx512_bf16 or amx_bf16 in "
        "/proc/cpuinfo): bfloat16 is emulated here and runs slower than float32; use --trainer.precision 32-true"
    )
