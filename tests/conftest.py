"""Shared fixtures: RNG hygiene, quiet Lightning logs, a clean argv, and the project's warning filters under -W."""

from __future__ import annotations

import logging
import os
import random
import sys

import pytest
import torch

from tests.cli_subprocess import _startup_environ

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two xdist workers on a 2-core machine, each with torch's default of one thread per core, oversubscribe the
    # cores: OpenMP's spin-waits then cost tens of ms per small op (a tiny DreamerV3 fit went from ~10 s to ~50 s).
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Apply pyproject's targeted ``filterwarnings`` also as marks.

    pytest applies ``-W`` after the ini filters, so ``pytest -W error`` would turn even those documented ignores
    into errors; marks rank above ``-W``. Everything they do not name still fails under ``-W error``.
    """
    marks = [pytest.mark.filterwarnings(spec) for spec in config.getini("filterwarnings")]
    for item in items:
        for mark in marks:
            item.add_marker(mark, append=False)


@pytest.fixture(autouse=True)
def _restore_rng_and_threads():
    """Tests must not leak global RNG state or thread settings into each other."""
    torch_state = torch.get_rng_state()
    py_state = random.getstate()
    threads = torch.get_num_threads()
    yield
    torch.set_rng_state(torch_state)
    random.setstate(py_state)
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _startup_environment_unchanged():
    """Code under test must not change the variables an interpreter reads at start-up (``OMP_NUM_THREADS``, ...)
    in the test process: the user's process keeps them too, and every later CLI test would leave the fork server
    for a fresh interpreter (5 s each instead of 0.5 s)."""
    before = _startup_environ(dict(os.environ))
    yield
    after = _startup_environ(dict(os.environ))
    assert after == before, f"the test left start-up variables changed: {set(after.items()) ^ set(before.items())}"


@pytest.fixture(autouse=True)
def _quiet_lightning_logs():
    """Lightning's INFO lines (GPU available, model summary) would drown test output; warnings are not touched."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@pytest.fixture(autouse=True)
def _clean_argv(monkeypatch):
    """In-process CLI runs see the argv a user's process would, not pytest's own options (LightningCLI warns)."""
    monkeypatch.setattr(sys, "argv", [sys.argv[0]])
