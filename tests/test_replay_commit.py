"""ReplayRing commits for asynchronous writers: committed-only windows, safety margin, readiness, state, checks."""

from __future__ import annotations

import io
import warnings

import pytest
import torch
from tensordict import TensorDict

from rl_lightning.data import ReplayRing, check_sequence_replay
from rl_lightning.errors import ConfigError


def _batch(t0: int, steps: int, num_envs: int, committed: bool = True) -> TensorDict:
    """Rows of global times ``t0 ..``; ``x = time * 100 + env``; ``mark`` flags rows that will stay uncommitted."""
    x = torch.arange(t0, t0 + steps).unsqueeze(1) * 100 + torch.arange(num_envs)
    mark = torch.full((steps, num_envs), not committed)
    return TensorDict({"x": x, "mark": mark}, batch_size=[steps, num_envs])


def _add(ring: ReplayRing, steps: int, committed: bool = True) -> None:
    """Add ``steps`` rows continuing the global time count, in chunks the ring accepts."""
    while True:
        chunk = min(steps, ring.capacity)
        ring.add(_batch(ring.total_added, chunk, ring.num_envs, committed))
        steps -= chunk
        if steps == 0:
            return


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _times(ring: ReplayRing, seq_len: int, seed: int, draws: int = 3000) -> tuple[torch.Tensor, torch.Tensor]:
    """``(time, env)`` of committed-only windows, checked to be consecutive rows of one env."""
    x = ring.sample_sequences(draws, seq_len, _gen(seed), committed_only=True)["x"]
    time, env = x // 100, x % 100
    assert (time.diff(dim=0) == 1).all()
    assert (env == env[0]).all()
    return time, env


def test_committed_only_never_returns_uncommitted_rows() -> None:
    ring = ReplayRing(capacity=16, num_envs=3, safety_margin=4)
    seen = 0
    for step, chunk in enumerate([3, 5, 2, 7, 4, 6, 1, 5, 3, 6, 2, 4]):
        _add(ring, chunk)
        if step % 3 != 2:  # every third chunk stays uncommitted until the next commit
            ring.commit()
            ring.add(_batch(0, 0, 3))  # an empty add changes nothing
        if ring.ready_rows() >= 3:
            out = ring.sample_sequences(500, 3, _gen(step), committed_only=True)
            time = out["x"] // 100
            assert time.max() < ring.committed_t
            assert time.min() >= ring.total_added + ring.safety_margin - ring.capacity
            seen += 1
    assert seen > 5
    # Rows written after the last commit carry mark=True; with no commit they are never drawn.
    _add(ring, 5, committed=False)
    out = ring.sample_sequences(3000, 2, _gen(99), committed_only=True)
    assert not out["mark"].any()
    assert ring.sample_sequences(3000, 2, _gen(99))["mark"].any()  # the default still samples them


def test_safety_margin_excluded_after_wrap() -> None:
    ring = ReplayRing(capacity=10, num_envs=2, safety_margin=3)
    _add(ring, 14)
    ring.commit()
    time, _ = _times(ring, seq_len=2, seed=0)
    # Stored times are 4..13; the oldest 3 (4, 5, 6) are in the margin.
    assert set(time.flatten().tolist()) == set(range(7, 14))
    assert ring.ready_rows() == 7
    assert ring.ready_rows(committed_only=False) == 10


def test_safety_margin_not_excluded_before_wrap() -> None:
    ring = ReplayRing(capacity=10, num_envs=2, safety_margin=3)
    _add(ring, 7)  # size + margin == capacity: the writer's next 3 rows still land in empty storage
    ring.commit()
    time, _ = _times(ring, seq_len=2, seed=1)
    assert set(time[0].tolist()) == set(range(0, 6))
    _add(ring, 1)  # now the writer's next rows could overwrite time 0
    ring.commit()
    time, _ = _times(ring, seq_len=2, seed=2)
    assert set(time[0].tolist()) == set(range(1, 7))


@pytest.mark.parametrize(("chunks", "commit_after", "seq_len"), [([9, 4], 1, 3), ([12, 12, 5], 2, 4), ([6], 1, 6)])
def test_every_eligible_start_and_env_is_reachable(chunks: list[int], commit_after: int, seq_len: int) -> None:
    ring = ReplayRing(capacity=12, num_envs=3, safety_margin=2)
    for i, steps in enumerate(chunks):
        _add(ring, steps)
        if i + 1 == commit_after:
            ring.commit()
    total, size = ring.total_added, ring.size
    lo = max(total - size, total + 2 - 12)
    time, env = _times(ring, seq_len, seed=len(chunks))
    assert set(time[0].tolist()) == set(range(lo, ring.committed_t - seq_len + 1))
    assert set(env[0].tolist()) == {0, 1, 2}


@pytest.mark.parametrize(
    ("adds", "commit_at", "margin", "committed", "everything"),
    [
        ([], None, 2, 0, 0),
        ([5], None, 2, 0, 5),  # never committed
        ([5], 5, 2, 5, 5),  # not full: no margin
        ([8, 9], 17, 3, 5, 8),  # lo = 17 + 3 - 8 = 12, hi = 17
        ([5, 2], 5, 2, 4, 7),  # uncommitted tail excluded; lo = 7 + 2 - 8 = 1: the margin starts to bite
        ([5, 1], 5, 2, 5, 6),  # 6 + 2 - 8 = 0: no margin yet
        ([5, 3], 5, 2, 3, 8),  # full: lo = 8 + 2 - 8 = 2, hi = 5
        ([8], 8, 2, 6, 8),  # full: margin of 2
        ([8, 8], 8, 2, 0, 8),  # the committed rows were all overwritten
        ([8, 8], 16, 0, 8, 8),
        ([8, 3], 8, 3, 2, 8),  # lo = 11 + 3 - 8 = 6, hi = 8
        ([8, 3], 11, 3, 5, 8),
    ],
)
def test_ready_rows(adds: list[int], commit_at: int | None, margin: int, committed: int, everything: int) -> None:
    ring = ReplayRing(capacity=8, num_envs=2, safety_margin=margin)
    for steps in adds:
        _add(ring, steps)
        if ring.total_added == commit_at:
            ring.commit()
    assert ring.ready_rows() == committed
    assert ring.ready_rows(committed_only=False) == everything
    assert isinstance(ring.ready_rows(), int)


def test_not_ready_error_names_committed_rows() -> None:
    ring = ReplayRing(capacity=8, num_envs=2, safety_margin=2)
    _add(ring, 6)
    with pytest.raises(ValueError, match="0 committed time rows .* ready, seq_len needs 2; add and commit"):
        ring.sample_sequences(4, 2, _gen(0), committed_only=True)
    ring.commit()
    with pytest.raises(ValueError, match="6 committed time rows .* ready, seq_len needs 7"):
        ring.sample_sequences(4, 7, _gen(0), committed_only=True)
    assert ring.sample(4, _gen(0), committed_only=True).batch_size == torch.Size([4])


def test_commit_records_point_and_event() -> None:
    ring = ReplayRing(capacity=8, num_envs=2)
    assert (ring.committed_t, ring.commit_event) == (0, None)
    _add(ring, 3)
    ring.commit()
    _add(ring, 2)
    assert (ring.committed_t, ring.total_added, ring.commit_event) == (3, 5, None)


def test_default_sampling_unchanged_by_commits_and_margin() -> None:
    plain, async_ring = ReplayRing(capacity=9, num_envs=3), ReplayRing(capacity=9, num_envs=3, safety_margin=4)
    for steps in [4, 6, 5]:
        for ring in (plain, async_ring):
            _add(ring, steps)
        async_ring.commit()
    _add(async_ring, 0)
    a = plain.sample_sequences(64, 3, _gen(5))
    b = async_ring.sample_sequences(64, 3, _gen(5))
    assert (a == b).all()
    assert "committed_t" not in plain.state_dict()  # a ring that never commits keeps its old state keys


def _round_trip(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_state_round_trip_with_storage_keeps_committed_t() -> None:
    ring = ReplayRing(capacity=10, num_envs=2, safety_margin=2)
    _add(ring, 13)
    ring.commit()
    _add(ring, 2)
    restored = ReplayRing(capacity=10, num_envs=2, safety_margin=2)
    restored.load_state_dict(_round_trip(ring.state_dict(include_storage=True)))
    assert (restored.committed_t, restored.total_added, restored.commit_event) == (13, 15, None)
    assert restored.ready_rows() == ring.ready_rows() == 6
    a = ring.sample_sequences(40, 3, _gen(3), committed_only=True)
    assert (a == restored.sample_sequences(40, 3, _gen(3), committed_only=True)).all()


def test_state_round_trip_without_storage_never_samples_lost_rows() -> None:
    ring = ReplayRing(capacity=10, num_envs=2, safety_margin=2)
    _add(ring, 13)
    ring.commit()
    _add(ring, 2)
    state = ring.state_dict()
    assert state["committed_t"] == 13
    restored = ReplayRing(capacity=10, num_envs=2, safety_margin=2)
    restored.load_state_dict(state)
    assert (restored.size, restored.committed_t, restored.total_added) == (0, 15, 15)
    assert restored.ready_rows() == restored.ready_rows(committed_only=False) == 0
    _add(restored, 4)
    assert (restored.ready_rows(), restored.ready_rows(committed_only=False)) == (0, 4)
    restored.commit()
    time, _ = _times(restored, seq_len=2, seed=4)
    assert set(time.flatten().tolist()) == set(range(15, 19))


def test_rejects_bad_safety_margin() -> None:
    with pytest.raises(ConfigError, match=r"safety_margin=-1 must be an int in \[0, capacity=8\)"):
        ReplayRing(capacity=8, num_envs=2, safety_margin=-1)
    with pytest.raises(ConfigError, match="safety_margin=8"):
        ReplayRing(capacity=8, num_envs=2, safety_margin=8)


GOOD = {"sequence_length": 64, "commit_stride": 16, "min_ready_steps": 1024, "safety_margin": 128, "capacity": 10_000}


def test_check_sequence_replay_accepts_a_sound_config() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_sequence_replay(**GOOD) == []
    assert check_sequence_replay(**{**GOOD, "commit_stride": 32, "capacity": 192}) == []


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"commit_stride": 0}, r"data\.commit_stride=0 must be >= 1"),
        ({"sequence_length": 1, "min_ready_steps": 1, "safety_margin": 1}, r"data\.sequence_length=1 must be >= 2"),
        ({"min_ready_steps": 63}, r"data\.min_ready_steps=63 must be >= sequence_length=64"),
        ({"safety_margin": 32}, r"data\.safety_margin=32 must be >= sequence_length=64"),
        ({"capacity": 191}, r"data\.capacity=191 must be >= safety_margin \+ sequence_length = 192"),
        ({"capacity": 1e4}, r"data\.capacity=10000\.0 must be an int"),
        ({"commit_stride": True}, r"data\.commit_stride=True must be an int"),
    ],
)
def test_check_sequence_replay_errors(override: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check_sequence_replay(**{**GOOD, **override})


def test_check_sequence_replay_uses_prefix_and_warns_on_a_coarse_stride() -> None:
    with pytest.raises(ConfigError, match=r"^replay\.commit_stride=-3 "):
        check_sequence_replay(**{**GOOD, "commit_stride": -3}, prefix="replay")
    with pytest.warns(UserWarning, match=r"data\.commit_stride=33 > data\.sequence_length/2=32"):
        messages = check_sequence_replay(**{**GOOD, "commit_stride": 33})
    assert len(messages) == 1
    assert "use commit_stride <= 32" in messages[0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_commit_event_and_committed_sampling() -> None:
    ring = ReplayRing(capacity=32, num_envs=4, device="cuda", safety_margin=4)
    writer = torch.cuda.Stream()
    for _ in range(5):
        with torch.cuda.stream(writer):
            _add(ring, 8)
            event = torch.cuda.Event()
            event.record(writer)
            ring.commit(event)
        _add(ring, 0)
        x = ring.sample_sequences(256, 4, _gen(0), committed_only=True)["x"]
        assert x.device.type == "cuda"
        time = (x // 100).cpu()
        assert (time.diff(dim=0) == 1).all()
        assert time.max() < ring.committed_t
        assert time.min() >= max(0, ring.total_added + 4 - 32)
    assert ring.commit_event is event
    with torch.cuda.stream(writer):
        _add(ring, 3)  # uncommitted: never sampled
    gen = torch.Generator(device="cuda").manual_seed(1)
    out = ring.sample_sequences(512, 2, gen, committed_only=True)
    assert not out["mark"].any().item()
    assert ((out["x"] // 100) < 40).all().item()
