"""``SeedGenerations``: a resume that switches between serial collection and actors starts past every env seed used.

Env seeds come in generations (``actors/gather.py``: generation ``g`` moves every seed by ``g · GENERATION_STRIDE``).
A serial collector plays generation 0, the same seeds as the actors' first generation; actors take the next
generation at every restart. A checkpoint counts the generations its run used (``actor_generation``, also written by
a serial run), and a resume in either mode starts past them: actors on the next generation, and a serial collector
whose streams the checkpoint does not hold (an actor run's checkpoint, or another world size's) on it too. Without
that, the first episodes after a switch would be the run's first episodes again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rl_lightning.data.actors.gather import GENERATION_STRIDE
from rl_lightning.data.on_policy import OnPolicyDataModule


def generations_used(state: Mapping[str, Any]) -> int:
    """Seed generations the run of a datamodule checkpoint used: its ``actor_generation``, else 1 for a serial
    checkpoint holding collectors (generation 0's streams; written before serial runs counted), else 0."""
    if "actor_generation" in state:
        return int(state["actor_generation"])
    return 1 if state.get("collectors") else 0


class SeedGenerations(OnPolicyDataModule):
    """An ``OnPolicyDataModule`` that counts its seed generations in either mode (see the module docstring); the
    replay modules build on it."""

    _serial_generation = 0  # the seed generation the serial collector's envs play

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if not self.num_actors:
            state["actor_generation"] = self._serial_generation + 1
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._actor_generation = generations_used(state_dict)  # where actors started now begin

    def _apply_state(self, state: dict[str, Any]) -> None:
        super()._apply_state(state)
        if self.collector is None:
            return  # actors: they start on ``_actor_generation``
        used = generations_used(state)
        if len(state.get("collectors", [])) == self.world_size:
            self._serial_generation = used - 1  # the checkpoint's own streams continue
        elif used:
            self._restart_streams(used)

    def _restart_streams(self, generation: int) -> None:
        """The serial collector afresh, its envs and sampler on seed ``generation``: fresh episodes from the next
        rollout on."""
        assert self.collector is not None
        assert self._env_seed is not None
        env = self.collector.env
        seed = self._env_seed + generation * GENERATION_STRIDE
        env.generator.manual_seed(seed)
        self.collector = self._make_collector(env, seed + 10_007)  # as setup() builds it, 10_007 past the envs
        self._serial_generation = generation
