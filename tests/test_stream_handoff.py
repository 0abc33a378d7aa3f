"""The async DreamerV3 engine's cross-stream hand-offs, checked on CPU with recorded streams (no GPU needed).

The engine runs its real ``cuda_async`` code path with ``RecordingOps`` in place of the CUDA primitives, so every
wait, event and ``record_stream`` it issues is logged and every access to state shared by the actor and the learner
(ring rows, episode sums, collector state) is checked against the stream order (``tests/stream_model.py``).
``tests/test_dreamer_cuda.py`` checks the same hand-offs on a real GPU.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from helpers import tiny_dreamer, trainer
from stream_model import FakeStream, RecordingOps, instrument
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.callbacks import CUDAStreamWeightSync
from rl_lightning.data.dreamer_stats import read_window_episode_stats
from rl_lightning.data.stream_handoff import StreamHandOff
from rl_lightning.envs.random_action import random_action

SHARED = ("ring", "episode_sums", "collector")


def _async_on_cpu(datamodule: Any, ops: RecordingOps) -> None:
    """Run the datamodule's async engine on CPU, with ``ops`` standing in for CUDA streams and events."""
    datamodule._make_handoff = lambda device: StreamHandOff(FakeStream("actor"), ops)


class _Instrument(pl.Callback):
    """Reports the engine's accesses to shared state; mid-run takes a checkpoint, restores it and reads stats."""

    def __init__(self, ops: RecordingOps, at_update: int = 3) -> None:
        self.ops = ops
        self.at_update = at_update
        self.stats_keeps: tuple[list[int], list[int], list[tuple[Any, ...]], list[torch.Tensor]] | None = None
        self.ring_reads: list[tuple[list[int], list[tuple[Any, ...]]]] = []

    def on_train_start(self, trainer, pl_module):
        dm, ops = trainer.datamodule, self.ops
        instrument(ops, dm.replay, "add", "ring", "write")
        instrument(ops, dm.collector, "tick", "collector", "write")
        instrument(ops, dm.collector, "state_dict", "collector", "read")
        instrument(ops, dm.collector, "load_state_dict", "collector", "write")
        sums = dm.collector.finished
        instrument(ops, sums, "update", "episode_sums", "write")
        instrument(ops, sums, "compute", "episode_sums", "read")
        instrument(ops, sums, "reset", "episode_sums", "write")
        sample = dm.replay.sample_sequences

        def sample_and_note(*args, **kwargs):
            storage = [id(t) for t in dm.replay.tensors()]
            self.ring_reads.append((storage, ops.log[len(ops.log) - len(storage) :]))
            ops.access("ring", "read")
            return sample(*args, **kwargs)

        dm.replay.sample_sequences = sample_and_note

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx != self.at_update:
            return
        dm = trainer.datamodule  # the window of this cycle is still "running" on the actor stream
        dm.load_state_dict(dm.state_dict())  # a checkpoint and a restore in the middle of collection
        sums = dm.collector.finished
        before, start = sums.tensors(), len(self.ops.log)  # held, so their ids cannot be reused by new tensors
        dm.handoff.acquire()  # as ``collect`` does before it reads
        read_window_episode_stats(dm.collector, dm.handoff)
        after = sums.tensors()
        keeps = [e for e in self.ops.log[start:] if e[0] == "keep"]
        self.stats_keeps = ([id(t) for t in before], [id(t) for t in after], keeps, before)


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory):
    """One CPU fit of the async engine under recorded streams (shared by the checks below)."""
    ops = RecordingOps()
    model, datamodule = tiny_dreamer(total_env_steps=96, learning_starts=16, save_replay=True)
    _async_on_cpu(datamodule, ops)
    probe = _Instrument(ops)
    trainer(tmp_path_factory.mktemp("recorded"), callbacks=[probe]).fit(model, datamodule)
    return ops, probe, model


def test_async_engine_orders_every_cross_stream_access(recorded_run):
    """Ring rows, episode sums and collector state: no write races a read or write on the other stream, including
    a checkpoint and a restore taken while the actor's window is in flight."""
    ops, _, model = recorded_run
    for resource in SHARED:  # both streams touched each resource, so the check below is not vacuous
        assert {stream for stream, _, _ in ops.order.accesses[resource]} == {"actor", "learner"}, resource
    assert ops.order.violations == []
    assert model.updates > 3


def test_the_learner_waits_for_the_window_before_reading_and_the_window_for_the_learner(recorded_run):
    ops, _, _ = recorded_run
    log = ops.log
    reads = [i for i, e in enumerate(log) if e[:2] == ("read", "episode_sums")]
    writes = [i for i, e in enumerate(log) if e == ("write", "ring", "actor")]
    assert len(reads) > 3
    assert len(writes) > 3
    for i in reads:  # the learner waited on the actor's last event before reading the sums
        last_wait = max(j for j in range(i) if log[j] == ("wait_event", "learner"))
        last_actor_event = max(j for j in range(i) if log[j] == ("record", "actor"))
        assert last_actor_event < last_wait < i
    for i in writes:  # the actor waited for the learner's last ring read before writing rows again
        ring_reads = [j for j in range(i) if log[j] == ("read", "ring", "learner")]
        if ring_reads:
            assert ("wait_stream", "actor", "learner") in log[ring_reads[-1] : i]


def test_shared_tensors_are_record_streamed_for_the_stream_that_uses_them(recorded_run):
    ops, probe, _ = recorded_run
    before, after, keeps, _ = probe.stats_keeps
    assert set(before).isdisjoint(after)  # reset allocated new sums on the learner stream
    assert keeps == [("keep", i, "learner") for i in before] + [("keep", i, "actor") for i in after]
    assert probe.ring_reads
    for storage, preceding in probe.ring_reads:
        assert storage
        assert preceding == [("keep", i, "learner") for i in storage]


def _random_player(spec):
    class RandomPlayer:
        def __call__(self, view, gen):
            action = random_action(spec, view, gen)
            return TensorDict({keys.ACTION: action}, batch_size=view.batch_size, device=view.device)

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            return None

    return lambda num_envs, device, deterministic=False: RandomPlayer()


def _fill(tmp_path, engine_async: bool):
    model, datamodule = tiny_dreamer(total_env_steps=96, learning_starts=16, save_replay=True, seed=3)
    model.player = _random_player(datamodule.env_spec)  # actions independent of the weights
    if engine_async:
        _async_on_cpu(datamodule, RecordingOps())
    returns: list[float] = []
    collect = datamodule.collect

    def collect_and_note():
        update = collect()
        returns.append(float(update.stats["rollout/episode_return"]))
        return update

    datamodule.collect = collect_and_note
    trainer(tmp_path).fit(model, datamodule)
    return datamodule.replay.state_dict(include_storage=True), returns, model


def test_async_and_cpu_engines_fill_the_ring_identically(tmp_path):
    """Same seed, weight-independent actions: the async path writes the same rows as the cpu engine, and reports
    each window's episode stats one cycle later (it reads them before the next window, never during one)."""
    ring_cpu, returns_cpu, model_cpu = _fill(tmp_path / "cpu", engine_async=False)
    ring_async, returns_async, model_async = _fill(tmp_path / "async", engine_async=True)
    assert model_cpu.updates > 0
    assert model_async.updates > 0
    assert ring_async["total_added"] == ring_cpu["total_added"] == 96 // 2
    storage_cpu, storage_async = ring_cpu["storage"], ring_async["storage"]
    assert storage_cpu.keys() == storage_async.keys()
    written = ring_cpu["total_added"]  # rows beyond are unwritten (uninitialised) storage
    for key in storage_cpu:
        if key == keys.POLICY_VERSION:  # the engines take their gradient steps on different cycles
            continue
        assert torch.equal(storage_async[key][:written], storage_cpu[key][:written]), key
    assert any(not math.isnan(r) for r in returns_cpu)
    assert math.isnan(returns_async[0])
    torch.testing.assert_close(
        torch.tensor(returns_async[1:]), torch.tensor(returns_cpu[:-1]), equal_nan=True, rtol=0, atol=0
    )


class _Module(SimpleNamespace):
    pass


def test_weight_hand_off_waits_for_learner_and_actor_then_publishes_the_event(monkeypatch):
    ops = RecordingOps()
    sync = CUDAStreamWeightSync()
    sync.ops, sync.stream = ops, FakeStream("side")
    src, dst = [torch.randn(3), torch.randn(2)], [torch.zeros(3), torch.zeros(2)]
    sync._src, sync._dst = src, dst
    copy = torch._foreach_copy_

    def logged_copy(*args, **kwargs):
        ops.access("actor_weights", "write")
        return copy(*args, **kwargs)

    monkeypatch.setattr(torch, "_foreach_copy_", logged_copy)
    actor = StreamHandOff(FakeStream("actor"), ops)
    with ops.use(actor.writer):
        ops.access("actor_weights", "read")  # the running window reads the old copy
    module = _Module(policy_version=1, actor_version=0, policy_ready_event=None)
    sync.hand_off(module, actor.writer)
    assert ops.log[1:6] == [
        ("wait_stream", "side", "learner"),  # the learner's optimiser step has run
        ("wait_stream", "side", "actor"),  # the running window has read the old copy
        ("write", "actor_weights", "side"),
        ("record", "side"),  # policy_ready_event, after the copy
        ("wait_event", "learner"),  # the learner's next step overwrites what the copy reads
    ]
    assert module.policy_ready_event is not None
    assert module.actor_version == 1
    for a, b in zip(dst, src, strict=True):
        assert torch.equal(a, b)
    actor.wait(module.policy_ready_event)  # what the next window does first
    with ops.use(actor.writer):
        ops.access("actor_weights", "read")
    ops.access("actor_weights", "read")  # e.g. Evaluation acting on the learner's stream after the hand-off
    assert ops.order.violations == []
    with ops.use(FakeStream("eval")):  # a reader that skips the wait races the copy
        ops.access("actor_weights", "read")
    assert ops.order.violations == ["read of actor_weights on eval races write on side"]


def test_policy_ready_event_is_none_on_cpu_and_reset_at_fit_start():
    model, _ = tiny_dreamer()
    model.policy_ready_event = "an event of an earlier fit"
    sync = CUDAStreamWeightSync()
    sync.on_fit_start(None, model)  # type: ignore[arg-type]
    assert model.policy_ready_event is None
    assert model.actor_networks is None  # CPU: the actor aliases the learner's weights


def test_fit_end_waits_for_the_side_and_actor_streams_before_freeing_the_copy():
    ops = RecordingOps()
    model, _ = tiny_dreamer()
    sync = CUDAStreamWeightSync()
    sync.ops, sync.stream = ops, FakeStream("side")
    run = SimpleNamespace(datamodule=SimpleNamespace(actor_stream=FakeStream("actor")))
    sync.on_fit_end(run, model)  # type: ignore[arg-type]
    assert ops.log == [("synchronize", "side"), ("synchronize", "actor")]
    assert model.actor_networks is None
    assert model.policy_ready_event is None
