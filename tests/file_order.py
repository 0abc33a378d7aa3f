"""The order the test files run in: the longest first, so that the two xdist workers of ``-n 2 --dist loadfile`` end
together instead of one of them running a long file alone at the end.

``--dist loadfile`` hands each worker whole files, in collection order (``--no-loadscope-reorder`` in pyproject;
xdist's own reorder puts the files of many tests first, which sends the files of a few long subprocess tests, Ray,
tune and DDP, to the end). Each file's seconds come from ``tests/file_seconds.json``, which a run of the suite
writes when ``RL_LIGHTNING_FILE_SECONDS`` names it::

    RL_LIGHTNING_FILE_SECONDS=tests/file_seconds.json python -m pytest -q -n 2 --dist loadfile

A file the record does not know (a new one) counts as the median file. The order changes nothing but the schedule:
every test still runs, each file's tests in their own order.
"""

from __future__ import annotations

import json
import os
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

RECORD = Path(__file__).resolve().parent / "file_seconds.json"
ENV = "RL_LIGHTNING_FILE_SECONDS"


def file_seconds(record: Path = RECORD) -> dict[str, float]:
    """``{"tests/test_x.py": seconds}`` as last recorded; empty when there is no record."""
    try:
        return {str(k): float(v) for k, v in json.loads(record.read_text()).items()}
    except (OSError, ValueError):
        return {}


def longest_files_first(items: list[pytest.Item], seconds: dict[str, float]) -> list[pytest.Item]:
    """``items`` with whole files ordered by their recorded seconds, longest first (ties and each file's own tests
    in collection order); an unrecorded file counts as the median recorded one."""
    typical = statistics.median(seconds.values()) if seconds else 0.0
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(_file(item.nodeid), len(first_seen))
    return sorted(items, key=lambda item: (-seconds.get(_file(item.nodeid), typical), first_seen[_file(item.nodeid)]))


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = longest_files_first(items, file_seconds())


class _Recorder:
    """Sums each file's setup, call and teardown seconds as the reports reach the controller; writes them at the
    end (set the variable for whole runs only: a run of some files writes only those)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[_file(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        rounded = {name: round(value, 1) for name, value in sorted(self.seconds.items())}
        self.path.write_text(json.dumps(rounded, indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get(ENV)
    if path and not hasattr(config, "workerinput"):  # the controller (or a run without xdist) sees every report
        config.pluginmanager.register(_Recorder(Path(path)), "file-seconds-recorder")
