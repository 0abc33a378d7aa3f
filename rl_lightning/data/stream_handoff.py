"""``StreamHandOff``: the explicit order between the actor's CUDA stream and the learner's (current) stream.

The async DreamerV3 engine shares tensors between two streams: the actor stream writes ring rows, episode
statistics, the env/collector state and the player's state; the learner's stream (whatever stream is current when
the datamodule is called, the default stream under Lightning) samples the ring, reads and resets the episode
statistics and reads the collector state for checkpoints. CUDA orders nothing across streams by itself, so every
hand-off is spelt out (``torch.cuda.Stream`` docs; lightning.md §9)::

    writer (actor) stream        ──[wait: reader so far]── writes ──(record `written`)──▶
                                          ▲                                      │
    reader (learner) stream   … reads ────┘                ──[wait: `written`]───┴── reads …

* ``writing()``: the writer waits on everything the reader has enqueued so far (its reads of rows, statistics or
  state the writer is about to overwrite are done), runs the writes with the writer stream current (so what it
  allocates belongs to the writer's pool), and records ``written`` at the end.
* ``acquire()``: the reader waits on ``written`` before it reads anything the writer produced.
* ``keep(tensors, stream)``: ``Tensor.record_stream`` for a tensor allocated on one stream and used on another, so
  the caching allocator does not hand its memory to a new tensor while the other stream may still use it.

Every primitive goes through ``ops`` (``CudaStreamOps`` by default), so a CPU test can substitute a recorder and
check the order of the hand-offs without a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch


class CudaStreamOps:
    """The CUDA primitives the hand-offs use; tests substitute an object with the same methods that logs calls."""

    def current(self, stream: Any) -> Any:
        """The current stream on ``stream``'s device."""
        return torch.cuda.current_stream(stream.device)

    def use(self, stream: Any) -> Any:
        """Context manager making ``stream`` current."""
        return torch.cuda.stream(stream)

    def record(self, stream: Any) -> Any:
        """A new event recorded on ``stream`` (completes once the work enqueued so far has)."""
        event = torch.cuda.Event()
        event.record(stream)
        return event

    def wait_event(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)

    def wait_stream(self, stream: Any, other: Any) -> None:
        stream.wait_stream(other)

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        tensor.record_stream(stream)

    def synchronize(self, stream: Any) -> None:
        """Host waits for ``stream`` (only at teardown, never in the hot loop)."""
        stream.synchronize()


class StreamHandOff:
    """Orders a writer stream (the actor) against the reader (the current stream); see the module docstring.

    Args:
        writer: the writer's stream.
        ops: the stream primitives (``CudaStreamOps``; a recorder in CPU tests).

    Attributes:
        written: event recorded on the writer after its last ``writing()`` block (``None`` before the first).
    """

    def __init__(self, writer: Any, ops: Any = None) -> None:
        self.writer = writer
        self.ops = ops if ops is not None else CudaStreamOps()
        self.written: Any = None

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Run the body on the writer stream, after the reader's work so far; record ``written`` after it."""
        ops = self.ops
        ops.wait_stream(self.writer, ops.current(self.writer))
        with ops.use(self.writer):
            yield
            self.written = ops.record(self.writer)

    def record(self) -> Any:
        """An event on the writer stream now (e.g. a ring commit); call it inside ``writing()``."""
        return self.ops.record(self.writer)

    def wait(self, event: Any) -> None:
        """Make the writer stream wait on ``event`` (another stream's hand-off, e.g. ``policy_ready_event``)."""
        if event is not None:
            self.ops.wait_event(self.writer, event)

    def acquire(self) -> None:
        """Make the reader (current) stream wait until the writer's last ``writing()`` block has run."""
        if self.written is not None:
            self.ops.wait_event(self.ops.current(self.writer), self.written)

    def keep_for_reader(self, tensors: Iterable[torch.Tensor]) -> None:
        """The reader is about to use ``tensors`` the writer owns: keep their memory until its use has run."""
        self.keep(tensors, self.ops.current(self.writer))

    def keep_for_writer(self, tensors: Iterable[torch.Tensor]) -> None:
        """The writer will use ``tensors`` the reader allocated: keep their memory until the writer's use has run."""
        self.keep(tensors, self.writer)

    def keep(self, tensors: Iterable[torch.Tensor], stream: Any) -> None:
        for tensor in tensors:
            self.ops.record_stream(tensor, stream)

    def synchronize(self) -> None:
        """Host waits for the writer (teardown only: its tensors are about to be freed)."""
        self.ops.synchronize(self.writer)


def writing_if_async(handoff: StreamHandOff | None) -> AbstractContextManager[None]:
    """``handoff.writing()``: the body on the writer (actor) stream, after the reader's work so far; nothing without a
    hand-off (the cpu engine)."""
    return nullcontext() if handoff is None else handoff.writing()
