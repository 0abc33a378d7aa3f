"""``PhaseTimer``: how long a phase (actor window, learner update) takes, without syncing the host.

On CPU it is wall time. On CUDA it records events on the phase's stream and reads the elapsed time only once both
events have completed (``Event.query()``), so measurements arrive a step late instead of stalling the hot loop.
"""

from __future__ import annotations

import time
from typing import Any

import torch


class PhaseTimer:
    """Times one recurring phase; ``last_ms`` is the most recent completed measurement (``None`` before any)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.last_ms: float | None = None
        self._start: Any = None
        self._pending: tuple[Any, Any] | None = None

    def start(self, stream: Any = None) -> None:
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record(stream)
        else:
            self._start = time.perf_counter()

    def stop(self, stream: Any = None) -> None:
        if not self.cuda:
            self.last_ms = 1e3 * (time.perf_counter() - self._start)
            return
        end = torch.cuda.Event(enable_timing=True)
        end.record(stream)
        self.poll()
        self._pending = (self._start, end)

    def poll(self) -> float | None:
        """Collect a finished CUDA measurement if there is one; returns ``last_ms``."""
        if self._pending is not None and self._pending[1].query():
            self.last_ms = self._pending[0].elapsed_time(self._pending[1])
            self._pending = None
        return self.last_ms
