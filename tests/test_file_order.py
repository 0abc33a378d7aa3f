"""The suite's schedule (``tests/file_order.py``): whole files, longest recorded first, each file's tests in order."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tests.file_order import RECORD, file_seconds, longest_files_first


def _items(*nodeids: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_files_run_longest_first_with_each_files_tests_in_their_order_and_a_new_file_as_the_median():
    items = _items("tests/a.py::one", "tests/b.py::one", "tests/a.py::two", "tests/new.py::x", "tests/c.py::one",
                   "tests/b.py::two", "tests/d.py::one")  # fmt: skip
    seconds = {"tests/a.py": 1.0, "tests/b.py": 30.0, "tests/c.py": 20.0, "tests/d.py": 2.0}  # median 11
    order = [i.nodeid for i in longest_files_first(items, seconds)]
    assert order == ["tests/b.py::one", "tests/b.py::two", "tests/c.py::one", "tests/new.py::x", "tests/d.py::one",
                     "tests/a.py::one", "tests/a.py::two"]  # fmt: skip
    unrecorded = [i.nodeid for i in longest_files_first(items, {})]  # no record: files as first collected
    assert unrecorded == ["tests/a.py::one", "tests/a.py::two", "tests/b.py::one", "tests/b.py::two", "tests/new.py::x",
                          "tests/c.py::one", "tests/d.py::one"]  # fmt: skip


def test_the_committed_record_names_files_that_exist(tmp_path):
    recorded = file_seconds()
    assert recorded, f"{RECORD} is missing or empty: write it with RL_LIGHTNING_FILE_SECONDS (see file_order.py)"
    root = RECORD.parents[1]
    gone = [name for name in recorded if not (root / name).is_file()]
    assert len(gone) <= len(recorded) // 10, f"{len(gone)} files of the record are gone: record it again ({gone[:5]})"
    (tmp_path / "bad.json").write_text("{not json")
    assert file_seconds(tmp_path / "bad.json") == {}
    (tmp_path / "ok.json").write_text(json.dumps({"tests/x.py": 2}))
    assert file_seconds(tmp_path / "ok.json") == {"tests/x.py": 2.0}
