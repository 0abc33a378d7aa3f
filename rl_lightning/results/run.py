"""What one run is, once read: its identity (task, config, seed) and every scalar tag as arrays."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Series:
    """One scalar tag of one run, in logging order.

    Attributes:
        steps: int64 ``[N]``, the TensorBoard step, which ``rl_lightning`` logs at the env step
            (``env_step_log.log_at_env_step``).
        wall: float64 ``[N]``, seconds since the run's first event.
        values: float64 ``[N]``.
    """

    steps: np.ndarray
    wall: np.ndarray
    values: np.ndarray


@dataclass
class Run:
    """One run (one seed): a TensorBoard run folder or a summary JSON.

    Attributes:
        source: the folder (or ``.json`` file) it was read from, as found.
        task: the env it trained on (``env_id``, else the env class's name), ``None`` when nothing says.
        config: the config's name: the TensorBoard logger's ``name`` (else the folder above ``version_N``).
        digest: sha256 prefix of the config without its seed and logger (runs of one config share it).
        algorithm: the model's class name (``PPO``), ``None`` when unknown.
        seed: ``seed_everything`` (else ``data.init_args.seed``), ``None`` when unknown.
        scalars: tag → ``Series``.
        group: what the run is drawn and tabulated as: a ``--label``, else the config's name (set by ``runs``).
        label: the ``--label`` (or the summary's label) that named the group, ``None`` for a config group.
        reference: a peer's run (``--reference-runs``): drawn and tabulated beside the others, never aggregated.
    """

    source: str
    task: str | None
    config: str
    digest: str
    algorithm: str | None
    seed: int | None
    scalars: dict[str, Series]
    group: str = ""
    label: str | None = None
    reference: bool = field(default=False)

    @property
    def env_steps(self) -> int:
        """The last env step any scalar was logged at (the env steps the run reached)."""
        return max((int(s.steps.max()) for s in self.scalars.values() if len(s.steps)), default=0)

    @property
    def wall_seconds(self) -> float:
        """Seconds from the run's first event to its last scalar."""
        return max((float(s.wall.max()) for s in self.scalars.values() if len(s.wall)), default=0.0)
