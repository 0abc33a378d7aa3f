"""ReplayRing: wrap-around writes, head-safe sequence sampling, determinism, errors and state_dict."""

from __future__ import annotations

import io

import pytest
import torch
from tensordict import TensorDict

from rl_lightning.data import ReplayRing
from rl_lightning.errors import ConfigError


def _batch(t0: int, steps: int, num_envs: int) -> TensorDict:
    """Rows of global times ``t0 .. t0+steps-1``; ``x = time * 100 + env`` identifies every transition."""
    time = torch.arange(t0, t0 + steps).unsqueeze(1)
    x = time * 100 + torch.arange(num_envs)
    return TensorDict(
        {
            "x": x,
            "obs": x.float().unsqueeze(-1).expand(steps, num_envs, 3).clone(),
            "feat": x.float().view(steps, num_envs, 1, 1).expand(steps, num_envs, 4, 2).clone(),
            "done": x % 2 == 0,
        },
        batch_size=[steps, num_envs],
    )


def _fill(ring: ReplayRing, chunks: list[int]) -> None:
    """Add chunks of the given lengths, continuing the global time count."""
    for steps in chunks:
        ring.add(_batch(ring.total_added, steps, ring.num_envs))


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _check_sequences(x: torch.Tensor, total_added: int, capacity: int) -> None:
    """Every column is consecutive in time, within one env, and only holds rows still present."""
    time, env = x // 100, x % 100
    assert (time.diff(dim=0) == 1).all()
    assert (env == env[0]).all()
    assert time.min() > total_added - capacity - 1
    assert time.max() < total_added


def test_wraps_like_a_list_reference() -> None:
    ring = ReplayRing(capacity=5, num_envs=3)
    reference: list[int] = []  # global times a naive list-based ring would still hold, oldest first
    for steps in [2, 3, 4, 1, 5, 3, 2]:
        t0 = ring.total_added
        reference = (reference + list(range(t0, t0 + steps)))[-5:]
        ring.add(_batch(t0, steps, 3))
        assert (ring.size, ring.total_added, ring.head) == (len(reference), t0 + steps, (t0 + steps) % 5)
        assert len(ring) == len(reference) * 3
        # seq_len == size has exactly one valid start: the whole content, oldest first.
        x = ring.sample_sequences(8, ring.size, _gen(steps))["x"]
        expected = torch.tensor(reference).unsqueeze(1) * 100 + x[0] % 100
        assert torch.equal(x, expected)


def test_never_straddles_head_after_many_wraps() -> None:
    ring = ReplayRing(capacity=7, num_envs=4)
    gen = _gen(0)
    for _ in range(20):
        _fill(ring, [3])
        if ring.size >= 4:
            x = ring.sample_sequences(500, 4, gen)["x"]
            assert x.shape == (4, 500)
            _check_sequences(x, ring.total_added, ring.capacity)
    assert ring.total_added == 60


@pytest.mark.parametrize(("chunks", "seq_len", "starts"), [([5], 2, range(0, 4)), ([8, 3], 3, range(3, 9))])
def test_covers_every_valid_start(chunks: list[int], seq_len: int, starts: range) -> None:
    ring = ReplayRing(capacity=8, num_envs=2)
    _fill(ring, chunks)
    x = ring.sample_sequences(2000, seq_len, _gen(1))["x"]
    assert set((x[0] // 100).tolist()) == set(starts)
    assert set((x[0] % 100).tolist()) == {0, 1}


def test_sample_single_transitions() -> None:
    ring = ReplayRing(capacity=6, num_envs=3)
    _fill(ring, [4, 5])
    out = ring.sample(1000, _gen(2))
    assert out.batch_size == torch.Size([1000])
    assert set((out["x"] // 100).tolist()) == set(range(3, 9))
    assert set((out["x"] % 100).tolist()) == {0, 1, 2}


def test_same_seed_same_samples_and_global_rng_untouched() -> None:
    ring = ReplayRing(capacity=10, num_envs=4)
    _fill(ring, [7, 6])
    rng_before = torch.get_rng_state()
    a = ring.sample_sequences(64, 3, _gen(7))
    b = ring.sample_sequences(64, 3, _gen(7))
    c = ring.sample_sequences(64, 3, _gen(8))
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert (a == b).all()
    assert not torch.equal(a["x"], c["x"])


def test_dtypes_and_feature_shapes_preserved() -> None:
    ring = ReplayRing(capacity=4, num_envs=2)
    _fill(ring, [3])
    seq = ring.sample_sequences(5, 2, _gen(0))
    assert seq.batch_size == torch.Size([2, 5])
    assert {k: v.dtype for k, v in seq.items()} == {
        "x": torch.int64,
        "obs": torch.float32,
        "feat": torch.float32,
        "done": torch.bool,
    }
    assert seq["obs"].shape == (2, 5, 3)
    assert seq["feat"].shape == (2, 5, 4, 2)
    assert torch.equal(seq["obs"][..., 1], seq["x"].float())
    assert torch.equal(seq["feat"][..., 3, 1], seq["x"].float())
    assert torch.equal(seq["done"], seq["x"] % 2 == 0)
    one = ring.sample(5, _gen(0))
    assert one["feat"].shape == (5, 4, 2)
    assert one["done"].dtype == torch.bool


@pytest.mark.parametrize(("kwargs", "match"), [({"capacity": 0}, "capacity=0"), ({"num_envs": -1}, "num_envs=-1")])
def test_rejects_bad_sizes(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ReplayRing(**{"capacity": 4, "num_envs": 2, **kwargs})


def test_rejects_bad_adds_and_samples() -> None:
    ring = ReplayRing(capacity=4, num_envs=2)
    with pytest.raises(ValueError, match="0 time rows ready, seq_len needs 1"):
        ring.sample(1, _gen(0))
    with pytest.raises(ValueError, match="T=5 time rows but capacity=4"):
        ring.add(_batch(0, 5, 2))
    with pytest.raises(ValueError, match="num_envs=2"):
        ring.add(_batch(0, 2, 3))
    _fill(ring, [2])
    with pytest.raises(ValueError, match="2 time rows ready, seq_len needs 3"):
        ring.sample_sequences(1, 3, _gen(0))
    bad = _batch(2, 1, 2)
    bad["extra"] = bad.pop("obs")
    with pytest.raises(ValueError, match=r"missing=\['obs'\], extra=\['extra'\]"):
        ring.add(bad)


def _round_trip(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_state_dict_with_storage_resumes_identically() -> None:
    ring = ReplayRing(capacity=6, num_envs=3)
    _fill(ring, [4, 5])
    restored = ReplayRing(capacity=6, num_envs=3)
    restored.load_state_dict(_round_trip(ring.state_dict(include_storage=True)))
    assert (restored.head, restored.size, restored.total_added) == (ring.head, ring.size, ring.total_added)
    assert (restored.sample_sequences(32, 3, _gen(5)) == ring.sample_sequences(32, 3, _gen(5))).all()
    for r in (ring, restored):
        _fill(r, [2])
    assert (restored.sample_sequences(32, 3, _gen(6)) == ring.sample_sequences(32, 3, _gen(6))).all()


def test_state_dict_saves_only_the_written_rows_of_a_partly_filled_ring() -> None:
    ring = ReplayRing(capacity=1024, num_envs=3)
    _fill(ring, [4, 5])
    state = _round_trip(ring.state_dict(include_storage=True))
    assert state["storage"]["x"].shape == (9, 3)  # 9 rows written, not the 1024 preallocated
    saved, full = io.BytesIO(), io.BytesIO()
    torch.save(state, saved)  # the file size, not just the shapes: a saved view would write its whole storage
    torch.save({**state, "storage": ring._storage.to_dict()}, full)
    assert saved.getbuffer().nbytes < full.getbuffer().nbytes / 10
    restored = ReplayRing(capacity=1024, num_envs=3)
    restored.load_state_dict(state)
    assert (restored.head, restored.size, restored.total_added) == (9, 9, 9)
    assert (restored.sample_sequences(32, 3, _gen(5)) == ring.sample_sequences(32, 3, _gen(5))).all()
    for r in (ring, restored):
        _fill(r, [1000, 100])  # wraps: the restored ring must have kept its full capacity
    assert (restored.sample_sequences(32, 3, _gen(6)) == ring.sample_sequences(32, 3, _gen(6))).all()
    _check_sequences(restored.sample_sequences(50, 8, _gen(7))["x"], restored.total_added, 1024)


def test_state_dict_without_storage_restarts_empty() -> None:
    ring = ReplayRing(capacity=6, num_envs=3)
    _fill(ring, [4, 5])
    state = ring.state_dict()
    assert state == {"capacity": 6, "num_envs": 3, "head": 3, "size": 6, "total_added": 9}
    restored = ReplayRing(capacity=6, num_envs=3)
    restored.load_state_dict(state)
    assert (restored.head, restored.size, len(restored), restored.total_added) == (0, 0, 0, 9)
    with pytest.raises(ValueError, match="0 time rows ready"):
        restored.sample(1, _gen(0))
    _fill(restored, [2])
    _check_sequences(restored.sample_sequences(50, 2, _gen(0))["x"], restored.total_added, 2)


def test_load_rejects_other_sizes() -> None:
    with pytest.raises(ValueError, match=r"saved \(capacity, num_envs\)=\(6, 3\) but this ring has \(6, 2\)"):
        ReplayRing(capacity=6, num_envs=2).load_state_dict(ReplayRing(capacity=6, num_envs=3).state_dict())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_storage_with_cpu_generator() -> None:
    ring = ReplayRing(capacity=8, num_envs=2, device="cuda")
    _fill(ring, [6, 5])
    x = ring.sample_sequences(200, 3, _gen(0))["x"]
    assert x.device.type == "cuda"
    _check_sequences(x.cpu(), ring.total_added, ring.capacity)
