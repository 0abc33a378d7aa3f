"""Shared fixtures: RNG hygiene, quiet Lightning, and small PPO runs."""

from __future__ import annotations

import logging
import random
import warnings

import pytest
import torch


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
def _quiet_lightning():
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
