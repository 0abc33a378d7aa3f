"""What a benchmark's subprocess costs the machine: the load average around it and its CPU seconds."""

from __future__ import annotations

import os
import resource
import statistics
import threading
from types import TracebackType


class LoadSampler:
    """Samples the 1-minute load average at entry and every ``every_s`` seconds while a ``with`` block runs."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s = every_s
        self.loads: list[float] = []
        self._done = threading.Event()

    def __enter__(self) -> LoadSampler:
        self.loads.append(os.getloadavg()[0])
        threading.Thread(target=self._sample, daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._done.set()

    def _sample(self) -> None:
        while not self._done.wait(self.every_s):
            self.loads.append(os.getloadavg()[0])

    @property
    def mean(self) -> float:
        return statistics.mean(self.loads)

    @property
    def max(self) -> float:
        return max(self.loads)


def children_cpu_seconds() -> float:
    """User + system seconds of this process's waited-for descendants so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
