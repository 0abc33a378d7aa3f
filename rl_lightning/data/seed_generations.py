"""Seed generations: a resume that switches between serial collection and actors starts past every env seed used.

Env seeds come in generations (``actors/gather.py``: generation ``g`` moves every seed by ``g · GENERATION_STRIDE``).
A serial collector plays generation 0, the same seeds as the actors' first generation; actors take the next
generation at every restart. A checkpoint counts the generations its run used (``actor_generation``, also written by
a serial run), and a resume in either mode starts past them: actors on the next generation, and a serial collector
whose streams the checkpoint does not hold (an actor run's checkpoint, or another world size's) on it too. Without
that, the first episodes after a switch would be the run's first episodes again. ``OnPolicyDataModule`` (and the
replay modules built on it) keep the count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def generations_used(state: Mapping[str, Any]) -> int:
    """Seed generations the run of a datamodule checkpoint used: its ``actor_generation``, else 1 for a serial
    checkpoint holding collectors (generation 0's streams; written before serial runs counted), else 0."""
    if "actor_generation" in state:
        return int(state["actor_generation"])
    return 1 if state.get("collectors") else 0
