"""A CPU model of CUDA stream ordering, to test the async engine's hand-offs without a GPU.

``RecordingOps`` stands in for ``CudaStreamOps``: it logs every primitive and feeds ``StreamOrder``, which keeps a
vector clock per stream (what each stream has waited for) and flags any two conflicting accesses to one resource
(write/write or read/write) made on different streams with no event or stream wait ordering them. This is the
rule CUDA's sanitizer (``TORCH_CUDA_SANITIZER=1``) enforces on a GPU, checked here on the engine's own calls.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class FakeStream:
    """A named stand-in for ``torch.cuda.Stream``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class StreamOrder:
    """Vector clocks per stream; ``violations`` lists unordered conflicting accesses."""

    def __init__(self) -> None:
        self.clock: dict[str, Counter[str]] = defaultdict(Counter)
        self.accesses: dict[str, list[tuple[str, int, str]]] = defaultdict(list)
        self.violations: list[str] = []

    def tick(self, stream: str) -> Counter[str]:
        clock = self.clock[stream]
        clock[stream] += 1
        return clock

    def record(self, stream: str) -> Counter[str]:
        return Counter(self.tick(stream))

    def wait(self, stream: str, seen: Counter[str]) -> None:
        clock = self.clock[stream]
        for name, value in seen.items():
            clock[name] = max(clock[name], value)

    def access(self, resource: str, stream: str, kind: str) -> None:
        clock = self.tick(stream)
        for other, when, other_kind in self.accesses[resource]:
            if other != stream and "write" in (kind, other_kind) and clock[other] < when:
                self.violations.append(f"{kind} of {resource} on {stream} races {other_kind} on {other}")
        self.accesses[resource].append((stream, clock[stream], kind))


class RecordingOps:
    """``CudaStreamOps`` on CPU: logs ``(op, stream, ...)`` tuples and keeps ``order`` up to date."""

    def __init__(self, default: str = "learner") -> None:
        self.log: list[tuple[Any, ...]] = []
        self.order = StreamOrder()
        self._current = [FakeStream(default)]

    @property
    def now(self) -> FakeStream:
        return self._current[-1]

    def current(self, stream: Any) -> FakeStream:
        return self.now

    @contextmanager
    def use(self, stream: FakeStream) -> Iterator[None]:
        self._current.append(stream)
        try:
            yield
        finally:
            self._current.pop()

    def record(self, stream: FakeStream) -> Counter[str]:
        self.log.append(("record", stream.name))
        return self.order.record(stream.name)

    def wait_event(self, stream: FakeStream, event: Counter[str]) -> None:
        self.log.append(("wait_event", stream.name))
        self.order.wait(stream.name, event)

    def wait_stream(self, stream: FakeStream, other: FakeStream) -> None:
        self.log.append(("wait_stream", stream.name, other.name))
        self.order.wait(stream.name, Counter(self.order.clock[other.name]))

    def record_stream(self, tensor: Any, stream: FakeStream) -> None:
        self.log.append(("keep", id(tensor), stream.name))

    def synchronize(self, stream: FakeStream) -> None:
        self.log.append(("synchronize", stream.name))

    def access(self, resource: str, kind: str) -> None:
        """An access to ``resource`` on the current stream (called by the instrumented engine methods)."""
        self.log.append((kind, resource, self.now.name))
        self.order.access(resource, self.now.name, kind)


def instrument(ops: RecordingOps, obj: Any, method: str, resource: str, kind: str) -> None:
    """Make ``obj.method`` report a ``kind`` access to ``resource`` on the current stream before it runs."""
    original: Callable[..., Any] = getattr(obj, method)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        ops.access(resource, kind)
        return original(*args, **kwargs)

    setattr(obj, method, wrapped)
