"""Shared fixtures: RNG hygiene, quiet Lightning logs, a clean argv, and the project's warning filters under -W."""

from __future__ import annotations

import logging
import os
import random
import signal
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
def _restore_signal_handlers():
    """A test must not leave its SIGTERM/SIGINT handlers to the next one: a Ray head node started in the test's
    process (``ray.cluster_utils.Cluster``) installs a SIGTERM handler that exits the process, which a later test's
    stop handler would then chain to (``test_stop.py`` failed so, after the Ray files in the same worker)."""
    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in kept.items():
        if handler is not None and signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)


#: Start-up variables third-party code rewrites in its own process: OpenCV (``cv2``, imported by the ALE and video
#: paths) prepends its libraries to ``LD_LIBRARY_PATH``, Lightning sets ``PYTORCH_NVML_BASED_CUDA_CHECK`` at import,
#: torch's inductor ``TORCHINDUCTOR_CACHE_DIR`` at its first compile (and on CUDA Triton's cache, ptxas and libdevice
#: paths, ``CUDA_HOME``, ``TORCH_WARM_POOL``), Lightning's CUDA accelerator ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` when a GPU
#: fit starts. Put back after each test, not reported.
IMPORT_SIDE_EFFECTS = frozenset(
    {
        "LD_LIBRARY_PATH",
        "PYTORCH_NVML_BASED_CUDA_CHECK",
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "TRITON_PTXAS_PATH",
        "TRITON_LIBDEVICE_PATH",
        "CUDA_HOME",
        "TORCH_WARM_POOL",
        "CUDA_DEVICE_ORDER",
    }
)
_STARTUP_BEFORE = pytest.StashKey[dict[str, str]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    item.stash[_STARTUP_BEFORE] = _startup_environ(dict(os.environ))  # before any fixture (``monkeypatch``) runs
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """After every fixture's teardown: code under test must not change the variables an interpreter reads at
    start-up (``OMP_NUM_THREADS``, ...) in the test process. The user's process would keep them, and every later CLI
    test would leave the fork server for a fresh interpreter (5 s each instead of 0.5 s). They are put back either
    way, so only the test that changed them fails."""
    result = yield
    before = item.stash.get(_STARTUP_BEFORE, None)
    if before is None:
        return result
    now = _startup_environ(dict(os.environ))
    changed = {name for name in set(now) | set(before) if now.get(name) != before.get(name)}
    for name in changed:
        if name in before:
            os.environ[name] = before[name]
        else:
            del os.environ[name]
    leaked = sorted(changed - IMPORT_SIDE_EFFECTS)
    assert not leaked, f"{item.nodeid} left start-up variables changed: {leaked}"
    return result


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
