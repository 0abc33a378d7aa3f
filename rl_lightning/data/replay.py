"""``ReplayRing``: a preallocated, time-major ring of transitions for off-policy replay (SPO, DreamerV3; DESIGN §5).

Row ``t`` of the ring holds the ``t``-th env step of every env, so a sequence of consecutive rows of one env is a
trajectory slice, which is what DreamerV3's world model trains on. Sampling takes an explicit ``torch.Generator``
and never returns a sequence that straddles the write head (the oldest and newest rows are not contiguous in time).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning.errors import ConfigError


class ReplayRing:
    """Fixed-capacity ring ``[capacity, num_envs, ...]`` of transitions on one device.

    Storage is allocated on the first ``add`` from that batch's keys, feature shapes and dtypes; every later batch
    must carry the same keys. Counters are Python ints, so bookkeeping never reads a tensor back from the device.

    Args:
        capacity: time rows kept per env; the ring holds ``capacity × num_envs`` transitions.
        num_envs: parallel envs writing into the ring; every added batch is ``[T, num_envs]``.
        device: where the storage lives (``"cpu"`` or a CUDA device); added batches are copied there.
    """

    def __init__(self, capacity: int, num_envs: int, device: str | torch.device = "cpu") -> None:
        _require_positive_int("capacity", capacity, "set the number of time rows kept per env, e.g. 100000")
        _require_positive_int("num_envs", num_envs, "set it to the number of envs writing into the ring, e.g. 8")
        self.capacity = capacity
        self.num_envs = num_envs
        self.device = torch.device(device)
        self._storage: TensorDict | None = None
        self._head = 0
        self._size = 0
        self._total_added = 0

    @property
    def head(self) -> int:
        """Storage row the next ``add`` writes first."""
        return self._head

    @property
    def size(self) -> int:
        """Time rows filled, at most ``capacity``."""
        return self._size

    @property
    def total_added(self) -> int:
        """Time rows ever written, including those since overwritten."""
        return self._total_added

    def __len__(self) -> int:
        """Transitions currently stored (``size × num_envs``)."""
        return self._size * self.num_envs

    def add(self, batch: TensorDict) -> None:
        """Write ``T`` time rows at the head, wrapping around the end of the storage.

        Args:
            batch: ``[T, num_envs]`` transitions with ``T <= capacity``.

        Raises:
            ValueError: if the batch shape is wrong or its keys differ from the ring's.
        """
        if batch.batch_dims != 2 or batch.batch_size[1] != self.num_envs:
            raise ValueError(f"batch_size={list(batch.batch_size)}; expected [T, num_envs={self.num_envs}]")
        steps = batch.batch_size[0]
        if steps > self.capacity:
            raise ValueError(f"batch has T={steps} time rows but capacity={self.capacity}; add it in smaller chunks")
        if self._storage is None:
            self._storage = self._allocate(batch)
        else:
            _check_keys(self._storage, batch)
        rows = (self._head + torch.arange(steps, device=self.device)) % self.capacity
        self._storage[rows] = batch.to(self.device)
        self._head = (self._head + steps) % self.capacity
        self._size = min(self._size + steps, self.capacity)
        self._total_added += steps

    def sample_sequences(self, batch_size: int, seq_len: int, generator: torch.Generator) -> TensorDict:
        """Sample ``batch_size`` slices of ``seq_len`` chronologically consecutive rows, each of one env.

        Args:
            batch_size: number of sequences.
            seq_len: time rows per sequence.
            generator: the only source of randomness; may live on another device than the storage.

        Returns:
            Time-major ``[seq_len, batch_size]`` TensorDict on the ring's device.

        Raises:
            ValueError: if ``batch_size``/``seq_len`` is not positive or fewer than ``seq_len`` rows are stored.
        """
        if batch_size < 1 or seq_len < 1:
            raise ValueError(f"batch_size={batch_size}, seq_len={seq_len}; both must be positive")
        if self._storage is None or seq_len > self._size:
            raise ValueError(f"replay has {self._size} time rows ready, seq_len needs {seq_len}; add env steps first")
        # Chronological offsets from the oldest row: when full that is the head, so no slice crosses it.
        oldest = self._head if self._size == self.capacity else 0
        gen_device = generator.device
        offsets = torch.randint(0, self._size - seq_len + 1, (batch_size,), generator=generator, device=gen_device)
        envs = torch.randint(0, self.num_envs, (batch_size,), generator=generator, device=gen_device)
        offsets, envs = offsets.to(self.device), envs.to(self.device)
        steps = torch.arange(seq_len, device=self.device).unsqueeze(1)
        time_idx = (oldest + offsets.unsqueeze(0) + steps) % self.capacity
        return self._storage[time_idx, envs.expand(seq_len, batch_size)]

    def sample(self, batch_size: int, generator: torch.Generator) -> TensorDict:
        """``[batch_size]`` single transitions, uniform over stored rows and envs; see ``sample_sequences``."""
        return self.sample_sequences(batch_size, 1, generator)[0]

    def state_dict(self, include_storage: bool = False) -> dict[str, Any]:
        """Counters, and optionally the stored tensors on CPU (large: save them per rank only when needed).

        Args:
            include_storage: also return the storage as a plain dict of CPU tensors.

        Returns:
            ``capacity``, ``num_envs``, ``head``, ``size``, ``total_added`` and, with ``include_storage``,
            ``storage`` (``None`` before the first ``add``) and ``storage_batch_size``.
        """
        state: dict[str, Any] = {
            "capacity": self.capacity,
            "num_envs": self.num_envs,
            "head": self._head,
            "size": self._size,
            "total_added": self._total_added,
        }
        if include_storage:
            state["storage"] = None if self._storage is None else self._storage.cpu().to_dict()
            state["storage_batch_size"] = [self.capacity, self.num_envs]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict``.

        Without a saved ``storage`` the ring restarts empty (``head = size = 0``) but keeps ``total_added``:
        rows that were not restored must never be sampled.

        Args:
            state: the output of ``state_dict``.

        Raises:
            ValueError: if the saved ``capacity``/``num_envs`` differ from this ring's.
        """
        saved = (state["capacity"], state["num_envs"])
        if saved != (self.capacity, self.num_envs):
            raise ValueError(
                f"saved (capacity, num_envs)={saved} but this ring has {(self.capacity, self.num_envs)}; "
                "build the ring with the saved sizes"
            )
        self._total_added = int(state["total_added"])
        storage = state.get("storage")
        if storage is None:
            self._storage, self._head, self._size = None, 0, 0
            return
        self._storage = TensorDict(storage, batch_size=state["storage_batch_size"]).to(self.device)
        self._head = int(state["head"])
        self._size = int(state["size"])

    def _allocate(self, batch: TensorDict) -> TensorDict:
        shape = (self.capacity, self.num_envs)
        return batch.apply(
            lambda x: torch.empty((*shape, *x.shape[2:]), dtype=x.dtype, device=self.device),
            batch_size=list(shape),
            device=self.device,
        )


def _check_keys(storage: TensorDict, batch: TensorDict) -> None:
    expected = set(storage.keys(include_nested=True, leaves_only=True))
    got = set(batch.keys(include_nested=True, leaves_only=True))
    if got != expected:
        raise ValueError(
            f"batch keys differ from the ring's: missing={sorted(expected - got, key=str)}, "
            f"extra={sorted(got - expected, key=str)}; add batches with the same keys"
        )


def _require_positive_int(name: str, value: object, fix: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}={value!r} must be a positive int; {fix}")
