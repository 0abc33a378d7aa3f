"""The RL-clock cadence shared by callbacks: once each time updates or env steps cross a multiple of N."""

from __future__ import annotations

from typing import Any

from rl_lightning.errors import ConfigError


def check_cadence(owner: str, every_n_updates: int | None, every_n_env_steps: int | None) -> None:
    """Raise ``ConfigError`` unless exactly one of the two is set, and it is >= 1."""
    if (every_n_updates is None) == (every_n_env_steps is None):
        raise ConfigError(
            f"{owner}: set exactly one of every_n_updates or every_n_env_steps "
            f"(got every_n_updates={every_n_updates}, every_n_env_steps={every_n_env_steps})"
        )
    for name, value in (("every_n_updates", every_n_updates), ("every_n_env_steps", every_n_env_steps)):
        if value is not None and value < 1:
            raise ConfigError(f"{owner}: {name}={value} must be >= 1")


class Cadence:
    """Fires once each time a counter (``updates`` or ``env_steps``) crosses a multiple of N.

    It remembers the last counter value it saw, so a training step that left the counter where it was (replay
    prefill before the first update, a fractional replay ratio that made no update this cycle) never fires, and a
    counter that jumped over several multiples at once fires once. Its ``state_dict`` belongs in the owning
    callback's, so a resumed run continues from the value seen before the checkpoint.

    Args:
        owner: the callback's name, for errors.
        every_n_updates: fire after every this many learner updates.
        every_n_env_steps: fire each time the env-step counter crosses a multiple of this.
    """

    def __init__(self, owner: str, every_n_updates: int | None, every_n_env_steps: int | None) -> None:
        check_cadence(owner, every_n_updates, every_n_env_steps)
        self.counter = "updates" if every_n_updates is not None else "env_steps"
        self.every = int(every_n_updates or every_n_env_steps or 0)
        self.last_seen = 0

    def due(self, pl_module: Any) -> bool:
        """Whether the counter crossed a multiple of N since the last call; records the counter either way."""
        value = int(getattr(pl_module, self.counter))
        last, self.last_seen = self.last_seen, value
        return value // self.every > last // self.every

    def state_dict(self) -> dict[str, Any]:
        return {"counter": self.counter, "last_seen": self.last_seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``last_seen`` (ignored when the saved cadence counted the other counter)."""
        if state.get("counter") == self.counter:
            self.last_seen = int(state["last_seen"])
