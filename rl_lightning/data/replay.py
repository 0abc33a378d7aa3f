"""``ReplayRing``: a preallocated, time-major ring of transitions for off-policy replay (SPO, DreamerV3; DESIGN §5).

Row ``t`` of the ring holds the ``t``-th env step of every env, so a sequence of consecutive rows of one env is a
trajectory slice, which is what DreamerV3's world model trains on. Sampling takes an explicit ``torch.Generator``
and never returns a sequence that straddles the write head (the oldest and newest rows are not contiguous in time).

Asynchronous writers (a collector on its own CUDA stream or thread) ``add`` rows and then ``commit`` them with a CUDA
event recorded after the writes; a learner that samples with ``committed_only=True`` sees only committed rows, waits
on that event, and keeps ``safety_margin`` rows away from the oldest end, which the writer's next rows overwrite.
``check_sequence_replay`` rejects, at setup, a window/commit/margin arithmetic that could never sample.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from tensordict import TensorDict

from rl_lightning.errors import ConfigError


class ReplayRing:
    """Fixed-capacity ring ``[capacity, num_envs, ...]`` of transitions on one device.

    Storage is allocated on the first ``add`` from that batch's keys, feature shapes and dtypes; every later batch
    must carry the same keys. Counters are Python ints, so bookkeeping never reads a tensor back from the device.

    Rows are named by their global time ``t`` (``0 .. total_added - 1``). The ring holds the newest ``size`` of them,
    and a sampled window ``[s, s + seq_len)`` must lie inside the eligible times ``[lo, hi)``::

        t:  total_added - size                                 committed_t          total_added
            |<- margin: the writer's next rows ->|<------ eligible ------>|<- uncommitted ->|
            [xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx[========================)~~~~~~~~~~~~~~~~~)
                                                 lo                       hi

        all rows (default):   lo = total_added - size
                              hi = total_added
        committed_only=True:  lo = max(total_added - size, total_added + safety_margin - capacity)
                              hi = committed_t

    The margin only bites when the ring is (nearly) full: the next ``safety_margin`` rows a writer adds overwrite
    times below ``total_added + safety_margin - capacity``. Starts ``s`` are uniform over ``[lo, hi - seq_len]``,
    envs uniform over ``num_envs``; time ``t`` lives in storage row ``(head - (total_added - t)) mod capacity``.

    Args:
        capacity: time rows kept per env; the ring holds ``capacity × num_envs`` transitions.
        num_envs: parallel envs writing into the ring; every added batch is ``[T, num_envs]``.
        device: where the storage lives (``"cpu"`` or a CUDA device); added batches are copied there.
        safety_margin: rows at the oldest end that ``committed_only`` sampling avoids once the ring is full, because
            a writer ahead of the sampler may be overwriting them; at least the rows a writer can add while one
            batch is being gathered (e.g. ``commit_stride``), and below ``capacity``.
    """

    def __init__(
        self, capacity: int, num_envs: int, device: str | torch.device = "cpu", safety_margin: int = 0
    ) -> None:
        _require_positive_int("capacity", capacity, "set the number of time rows kept per env, e.g. 100000")
        _require_positive_int("num_envs", num_envs, "set it to the number of envs writing into the ring, e.g. 8")
        if isinstance(safety_margin, bool) or not isinstance(safety_margin, int) or not 0 <= safety_margin < capacity:
            raise ConfigError(
                f"safety_margin={safety_margin!r} must be an int in [0, capacity={capacity}); "
                "use about the rows a writer adds per commit, e.g. 64"
            )
        self.capacity = capacity
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.safety_margin = safety_margin
        self._storage: TensorDict | None = None
        # (head, size, total_added) and (committed_t, event) are each replaced in one assignment, so a sampler on
        # another thread always reads a consistent snapshot.
        self._counters = (0, 0, 0)
        self._commit: tuple[int, torch.cuda.Event | None] = (0, None)
        self._committing = False  # commit() was called at least once (or restored): state_dict carries committed_t

    @property
    def head(self) -> int:
        """Storage row the next ``add`` writes first."""
        return self._counters[0]

    @property
    def size(self) -> int:
        """Time rows filled, at most ``capacity``."""
        return self._counters[1]

    @property
    def total_added(self) -> int:
        """Time rows ever written, including those since overwritten."""
        return self._counters[2]

    @property
    def committed_t(self) -> int:
        """Time rows ever committed: rows with time ``t < committed_t`` are complete (0 before any ``commit``)."""
        return self._commit[0]

    @property
    def commit_event(self) -> torch.cuda.Event | None:
        """The event given to the last ``commit``; ``committed_only`` sampling on CUDA waits on it."""
        return self._commit[1]

    def __len__(self) -> int:
        """Transitions currently stored (``size × num_envs``)."""
        return self.size * self.num_envs

    def tensors(self) -> list[torch.Tensor]:
        """The storage's tensors (none before the first ``add``), e.g. to ``record_stream`` them for a reader."""
        if self._storage is None:
            return []
        return list(self._storage.values(include_nested=True, leaves_only=True))

    def newest(self) -> TensorDict | None:
        """The last time row written, ``[num_envs]``, as views of the storage (writing them edits the ring);
        ``None`` while the ring is empty."""
        if self._storage is None or self.size == 0:
            return None
        return self._storage[(self.head - 1) % self.capacity]

    def add(self, batch: TensorDict) -> None:
        """Write ``T`` time rows at the head, wrapping around the end of the storage.

        The rows are not committed: call ``commit`` once their writes are enqueued.

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
        head, size, total = self._counters
        rows = (head + torch.arange(steps, device=self.device)) % self.capacity
        self._storage[rows] = batch.to(self.device)
        self._counters = ((head + steps) % self.capacity, min(size + steps, self.capacity), total + steps)

    def commit(self, event: torch.cuda.Event | None = None) -> None:
        """Mark every row added so far as committed (``committed_t = total_added``).

        Args:
            event: a CUDA event recorded on the writer's stream after those rows' writes, which ``committed_only``
                sampling makes the reader's stream wait on; ``None`` on CPU or when writer and reader share a stream.
        """
        self._commit = (self.total_added, event)
        self._committing = True

    def ready_rows(self, committed_only: bool = True) -> int:
        """Eligible time rows per env, ``hi - lo`` in the class diagram: a window of ``L`` rows fits iff ``>= L``.

        Args:
            committed_only: count only committed rows clear of the safety margin; ``False`` counts every stored row.
        """
        lo, hi, _ = self._window(committed_only)
        return max(0, hi - lo)

    def sample_sequences(
        self, batch_size: int, seq_len: int, generator: torch.Generator, *, committed_only: bool = False
    ) -> TensorDict:
        """Sample ``batch_size`` slices of ``seq_len`` chronologically consecutive rows, each of one env.

        Args:
            batch_size: number of sequences.
            seq_len: time rows per sequence.
            generator: the only source of randomness; may live on another device than the storage.
            committed_only: sample only committed rows clear of the safety margin (see the class docstring), after
                making the current CUDA stream wait on ``commit_event``; ``False`` samples every stored row.

        Returns:
            Time-major ``[seq_len, batch_size]`` TensorDict on the ring's device.

        Raises:
            ValueError: if ``batch_size``/``seq_len`` is not positive or fewer than ``seq_len`` rows are eligible.
        """
        if batch_size < 1 or seq_len < 1:
            raise ValueError(f"batch_size={batch_size}, seq_len={seq_len}; both must be positive")
        lo, hi, oldest_row = self._window(committed_only)
        if self._storage is None or seq_len > hi - lo:
            kind = "committed time rows (outside the safety margin)" if committed_only else "time rows"
            fix = "add and commit env steps first" if committed_only else "add env steps first"
            raise ValueError(f"replay has {max(0, hi - lo)} {kind} ready, seq_len needs {seq_len}; {fix}")
        event = self._commit[1] if committed_only else None
        if event is not None and self.device.type == "cuda":
            torch.cuda.current_stream(self.device).wait_event(event)
        gen_device = generator.device
        offsets = torch.randint(0, hi - lo - seq_len + 1, (batch_size,), generator=generator, device=gen_device)
        envs = torch.randint(0, self.num_envs, (batch_size,), generator=generator, device=gen_device)
        offsets, envs = offsets.to(self.device), envs.to(self.device)
        steps = torch.arange(seq_len, device=self.device).unsqueeze(1)
        time_idx = (oldest_row + offsets.unsqueeze(0) + steps) % self.capacity
        return self._storage[time_idx, envs.expand(seq_len, batch_size)]

    def sample(self, batch_size: int, generator: torch.Generator, *, committed_only: bool = False) -> TensorDict:
        """``[batch_size]`` single transitions, uniform over eligible rows and envs; see ``sample_sequences``."""
        return self.sample_sequences(batch_size, 1, generator, committed_only=committed_only)[0]

    def state_dict(self, include_storage: bool = False) -> dict[str, Any]:
        """Counters, and optionally the stored tensors on CPU (large: save them per rank only when needed).

        Args:
            include_storage: also return the storage as a plain dict of CPU tensors.

        Returns:
            ``capacity``, ``num_envs``, ``head``, ``size``, ``total_added``; ``committed_t`` once ``commit`` has been
            called; and, with ``include_storage``, ``storage`` (the ``size`` written rows only; ``None`` before the
            first ``add``) and ``storage_batch_size``. The commit event is not saved.
        """
        head, size, total = self._counters
        state: dict[str, Any] = {
            "capacity": self.capacity,
            "num_envs": self.num_envs,
            "head": head,
            "size": size,
            "total_added": total,
        }
        if self._committing:
            state["committed_t"] = self.committed_t
        if include_storage:
            # Until the ring first wraps, the written rows are storage rows [0, size) (head == size): only those
            # are saved, so a partly filled ring does not write its whole preallocated capacity. The clone matters:
            # torch.save writes a view's whole underlying storage.
            written = None if self._storage is None else self._storage[:size]
            state["storage"] = None if written is None else written.cpu().clone().to_dict()
            state["storage_batch_size"] = [size, self.num_envs]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict``.

        Without a saved ``storage`` the ring restarts empty (``head = size = 0``) but keeps ``total_added``, and
        ``committed_t = total_added``: rows that were not restored must never be sampled, and rows added later are
        uncommitted until the next ``commit``. With storage, ``committed_t`` is restored (0 if it was never saved).

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
        total = int(state["total_added"])
        self._committing = "committed_t" in state
        storage = state.get("storage")
        if storage is None:
            self._storage, self._counters, self._commit = None, (0, 0, total), (total, None)
            return
        written = TensorDict(storage, batch_size=state["storage_batch_size"]).to(self.device)
        self._storage = self._allocate(written)
        self._storage[: written.batch_size[0]] = written
        self._counters = (int(state["head"]), int(state["size"]), total)
        self._commit = (min(int(state.get("committed_t", 0)), total), None)

    def _window(self, committed_only: bool) -> tuple[int, int, int]:
        """Eligible times ``[lo, hi)`` and the storage row of time ``lo``, from one snapshot of the counters."""
        head, size, total = self._counters
        lo, hi = total - size, total
        if committed_only:
            lo = max(lo, total + self.safety_margin - self.capacity)
            hi = min(self._commit[0], total)
        return lo, hi, (head - (total - lo)) % self.capacity

    def _allocate(self, batch: TensorDict) -> TensorDict:
        shape = (self.capacity, self.num_envs)
        return batch.apply(
            lambda x: torch.empty((*shape, *x.shape[2:]), dtype=x.dtype, device=self.device),
            batch_size=list(shape),
            device=self.device,
        )


def check_sequence_replay(
    *,
    sequence_length: int,
    commit_stride: int,
    min_ready_steps: int,
    safety_margin: int,
    capacity: int,
    prefix: str = "data",
) -> list[str]:
    """Validate how an asynchronously written ``ReplayRing`` is sampled in windows (see its class docstring).

    Args:
        sequence_length: time rows per sampled window (DreamerV3's T, e.g. 64).
        commit_stride: rows the writer adds between two ``commit`` calls.
        min_ready_steps: eligible rows per env required before training starts.
        safety_margin: the ring's ``safety_margin``.
        capacity: the ring's time rows per env.
        prefix: config group named in messages, e.g. ``"data"`` → ``data.commit_stride``.

    Returns:
        Warnings (also emitted on rank zero): empty for a sound config.

    Raises:
        ConfigError: naming the first bad ``{prefix}.<field>``, its value and the fix.
    """
    values = {
        "sequence_length": sequence_length,
        "commit_stride": commit_stride,
        "min_ready_steps": min_ready_steps,
        "safety_margin": safety_margin,
        "capacity": capacity,
    }
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{prefix}.{name}={value!r} must be an int")
    checks = [
        ("commit_stride", commit_stride >= 1, "must be >= 1; commit at least every env step, e.g. 16"),
        ("sequence_length", sequence_length >= 2, "must be >= 2 for a world-model window; e.g. 64"),
        (
            "min_ready_steps",
            min_ready_steps >= sequence_length,
            f"must be >= sequence_length={sequence_length} so one window fits; raise it to at least {sequence_length}",
        ),
        (
            "safety_margin",
            safety_margin >= sequence_length,
            f"must be >= sequence_length={sequence_length}; raise it to at least {sequence_length}",
        ),
        (
            "capacity",
            capacity >= safety_margin + sequence_length,
            f"must be >= safety_margin + sequence_length = {safety_margin + sequence_length} or no window is ever "
            f"eligible once the ring is full; raise it to at least {safety_margin + sequence_length}",
        ),
    ]
    for name, ok, fix in checks:
        if not ok:
            raise ConfigError(f"{prefix}.{name}={values[name]!r} {fix}")
    warnings: list[str] = []
    if 2 * commit_stride > sequence_length:
        warnings.append(
            f"{prefix}.commit_stride={commit_stride} > {prefix}.sequence_length/2={sequence_length / 2:g}: the learner "
            f"sees rows up to {commit_stride} env steps late and the newest windows wait long for a commit; "
            f"use commit_stride <= {sequence_length // 2}"
        )
    for message in warnings:
        rank_zero_warn(message)
    return warnings


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
