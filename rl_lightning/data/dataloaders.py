"""What the on-policy datamodules hand Lightning: a ``RolloutStream`` of ``Rollout``s for ``fit``, and for
``validate``/``test`` one ``EvalRequest`` (``EvalOnce``), which the ``EvalRequests`` callback plays."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import torch
from tensordict import TensorDict


@dataclass
class Rollout:
    """One update's worth of on-policy data.

    Attributes:
        batch: ``[num_steps, num_envs]`` transitions, with the module's ``process_rollout`` targets added.
        stats: scalar tensors for logging (``rollout/*``, ``perf/*``), global across ranks.
    """

    batch: TensorDict
    stats: dict[str, torch.Tensor] = field(default_factory=dict)


class Collecting(Protocol):
    """A datamodule that collects one ``Rollout`` per call until its env-step budget is spent."""

    total_env_steps: int

    @property
    def env_steps(self) -> int: ...

    def collect(self) -> Rollout: ...


@dataclass  # not frozen: Lightning rebuilds batches when moving them to a device
class EvalRequest:
    """The one "batch" of ``validate``/``test``: play ``num_episodes`` episodes with env seed ``seed`` (``None``:
    the ``Evaluation`` callback's)."""

    num_episodes: int | None
    seed: int | None


class EvalOnce:
    """A one-item iterable, so Lightning's validate/test loops call ``validation_step`` exactly once."""

    def __init__(self, request: EvalRequest) -> None:
        self.request = request

    def __iter__(self) -> Iterator[EvalRequest]:
        return iter([self.request])

    def __len__(self) -> int:
        return 1


class RolloutStream:
    """Plain iterable over rollouts (no ``__len__``: the run length is set by env steps, not epochs)."""

    def __init__(self, datamodule: Collecting) -> None:
        self.datamodule = datamodule

    def __iter__(self) -> Iterator[Rollout]:
        return self

    def __next__(self) -> Rollout:
        if self.datamodule.env_steps >= self.datamodule.total_env_steps:
            raise StopIteration
        return self.datamodule.collect()
