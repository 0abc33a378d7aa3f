"""CPU seconds of a whole process tree, sampled from ``/proc`` while it runs.

``getrusage(RUSAGE_CHILDREN)`` counts only the processes their parents waited for, up a chain of waits to the
caller. A fit's actor processes are forked by multiprocessing's fork server, which nobody waits for (it exits once
the fit has gone), so their CPU time never reaches the caller's rusage: on ``ppo_walker2d.yaml`` (one actor) the
rusage read 13.4 s where the tree had spent 23.1 s. ``TreeCPU`` walks the tree under a pid every ``interval`` seconds
and keeps each process's last seen user + system time; the total misses at most ``interval`` seconds of each process
(a lower bound, close for processes that live for seconds). Linux only; elsewhere it reports ``None``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _table() -> dict[int, tuple[int, float]]:
    """Every live process: pid -> (parent pid, its own user + system CPU seconds)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone between the listing and the read
        found[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    return found


def descendants(root: int, table: dict[int, tuple[int, float]]) -> set[int]:
    """``root`` and every process below it in ``table`` (pid -> (parent pid, cpu))."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    tree, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree


class TreeCPU:
    """Samples the CPU time of ``pid``'s process tree in a daemon thread until ``stop()``, which returns the total
    CPU seconds seen (``None`` without ``/proc``)."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid, self.interval = pid, interval
        self.seen: dict[int, float] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, name=f"tree-cpu-{pid}", daemon=True)
        self.available = Path("/proc/self/stat").is_file()
        if self.available:
            self._thread.start()

    def _sample(self) -> None:
        while not self._done.is_set():
            table = _table()
            for pid in descendants(self.pid, table) & table.keys():
                self.seen[pid] = max(self.seen.get(pid, 0.0), table[pid][1])
            self._done.wait(self.interval)

    def stop(self) -> float | None:
        if not self.available:
            return None
        self._done.set()
        self._thread.join()
        return round(sum(self.seen.values()), 1)
