"""DreamerV3 on CUDA: the async engine's cross-stream hand-offs under a busy actor stream (skip without GPU).

Each hazard gets a test that delays one stream with ``torch.cuda._sleep`` so a missing wait shows up as wrong data:
the actor stream before ring writes, episode-sum updates and weight reads; the learner stream before the weight
copy. ``tests/test_stream_handoff.py`` checks the same order on CPU with recorded streams.

Run them under PyTorch's CUDA sanitizer too (``test_cuda_tests_pass_under_the_cuda_sanitizer`` does it in a
subprocess)::

    TORCH_CUDA_SANITIZER=1 python -m pytest -q tests/test_dreamer_cuda.py -k "not sanitizer"
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from helpers import tiny_dreamer, trainer
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.callbacks import CUDAStreamWeightSync
from rl_lightning.data import ReplayRing
from rl_lightning.envs import CartPole
from rl_lightning.envs.random_action import random_action

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

TICK_SLEEP = 2_000_000  # GPU cycles (~1 ms) the actor stream sleeps before each tick's work


class _Probe(pl.Callback):
    """Checks, inside a real fit, where tensors live and that the hot loops never sync with the host."""

    def __init__(self) -> None:
        self.checked = 0
        self.versions: list[tuple[int, int]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        dm = trainer.datamodule
        self.versions.append((pl_module.policy_version, pl_module.actor_version))
        if self.checked or pl_module.updates < 2:
            return
        assert dm.async_engine
        assert pl_module.actor_networks is not None
        for tensor in [*pl_module.actor_networks.parameters(), *pl_module.parameters()]:
            assert tensor.is_cuda
        assert dm.replay.state_dict(include_storage=False)["size"] > 0
        for value in dm.replay.tensors():
            assert value.is_cuda
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            dm.handoff.acquire()
            batches = dm._sample(1)
            dm._actor_window(pl_module)  # actor hot loop: env ticks, player, ring writes and commits
            pl_module.update(batches, pl_module.optimizers())  # learner hot loop: one gradient step
        finally:
            torch.cuda.set_sync_debug_mode(0)
        self.checked += 1


def test_async_engine_fits_on_gpu_without_deadlock_or_host_sync(tmp_path):
    model, datamodule = tiny_dreamer(total_env_steps=160, learning_starts=16)
    probe = _Probe()
    run = trainer(tmp_path, callbacks=[probe], accelerator="gpu")
    run.fit(model, datamodule)
    assert probe.checked == 1
    assert model.updates > 2
    # The actor acts with weights at most one update old, and every hand-off is tracked.
    assert all(0 <= learner - actor <= 1 for learner, actor in probe.versions)
    for key in ("perf/actor_ms", "perf/learner_ms", "policy/actor_version", "replay/committed_t"):
        assert key in model.last_metrics
    assert model.policy_ready_event is None  # on_fit_end: no event outlives the fit


# ----- a busy actor stream --------------------------------------------------------------------------------------
class _Slow:
    """Wraps a policy: the actor stream sleeps before each tick, so everything the tick writes lands late."""

    def __init__(self, policy: Any, cycles: int = TICK_SLEEP) -> None:
        self.policy = policy
        self.cycles = cycles

    def __call__(self, view: TensorDict, generator: torch.Generator) -> TensorDict:
        torch.cuda._sleep(self.cycles)  # on the current stream: the actor's, inside its window
        return self.policy(view, generator)

    def __getattr__(self, name: str) -> Any:  # state_dict / load_state_dict of the player
        return getattr(self.policy, name)


def _slow_actor(datamodule: Any, cycles: int = TICK_SLEEP, random_actions: bool = False) -> None:
    policy = datamodule._policy

    def slow_policy(module: Any) -> _Slow:
        if random_actions:  # actions independent of the weights, so two engines can write identical rows
            spec = datamodule.env_spec
            return _Slow(lambda v, g: TensorDict({keys.ACTION: random_action(spec, v, g)}, v.batch_size), cycles)
        return _Slow(policy(module), cycles)

    datamodule._policy = slow_policy


class _Recorder(pl.Callback):
    """Keeps every row the actor wrote, what the learner sampled each cycle (with the sampler's state), and the
    stats each cycle reported. Holding the tensors keeps their memory; they are read after a synchronize."""

    def __init__(self) -> None:
        self.rows: list[TensorDict] = []
        self.samples: list[tuple[Any, tuple[int, int, int], int, int, TensorDict | None]] = []
        self.stats: list[dict[str, float]] = []
        self.windows: list[tuple[int, int]] = []  # (first tick, end tick) of each actor window

    def on_train_start(self, trainer, pl_module):
        dm = trainer.datamodule
        add, sample, window, collect = dm.replay.add, dm._sample, dm._actor_window, dm.collect

        def add_and_keep(batch):
            self.rows.append(batch)
            return add(batch)

        def sample_and_keep(due):
            ring = dm.replay
            state = (dm.sample_generator.get_state(), ring._counters, ring.committed_t, due)
            batches = sample(due)
            self.samples.append((*state, batches))
            return batches

        def window_and_note(module):
            start = dm.replay.total_added
            window(module)
            self.windows.append((start, dm.replay.total_added))

        def collect_and_note():
            update = collect()
            self.stats.append({k: float(v) for k, v in update.stats.items() if k.startswith(("rollout/", "perf/"))})
            return update

        dm.replay.add, dm._sample = add_and_keep, sample_and_keep
        dm._actor_window, dm.collect = window_and_note, collect_and_note


def _fit_recorded(
    tmp_path, engine: str = "cuda_async", random_actions: bool = False, cycles: int = TICK_SLEEP, **kwargs: Any
):
    """A GPU fit with a busy actor stream, recorded (``_Recorder``); returns after a device synchronize."""
    pl.seed_everything(0)
    settings = {"total_env_steps": 160, "learning_starts": 16, "replay_ratio": 1.0, "seed": 1, **kwargs}
    model, datamodule = tiny_dreamer(CartPole(max_episode_steps=8), engine=engine, **settings)
    _slow_actor(datamodule, cycles, random_actions)
    recorder = _Recorder()
    trainer(tmp_path, callbacks=[recorder], accelerator="gpu").fit(model, datamodule)
    torch.cuda.synchronize()
    return recorder, datamodule, model


def _expected_sample(history: TensorDict, ring: ReplayRing, record: tuple, datamodule: Any) -> TensorDict:
    """What ``_sample`` must return for the recorded sampler state, rebuilt from the rows the actor wrote."""
    gen_state, (_, _, total), committed, due, _ = record
    ref = ReplayRing(ring.capacity, ring.num_envs, ring.device, safety_margin=ring.safety_margin)
    ref.add(history[:committed])  # callers check that nothing was overwritten (total <= capacity)
    ref.commit()
    if total > committed:
        ref.add(history[committed:total])
    generator = torch.Generator(device=ring.device)
    generator.set_state(gen_state)
    flat = ref.sample_sequences(due * datamodule.batch_size, datamodule.sequence_length, generator, committed_only=True)
    return flat.reshape(datamodule.sequence_length, due, datamodule.batch_size).transpose(0, 1)


def test_learner_samples_exactly_the_committed_rows_while_the_actor_stream_is_busy(tmp_path):
    """Ring writes land late (the actor sleeps before each tick); every batch the learner sampled must hold the
    rows the actor wrote at those times, never rows still being written (the ring's storage starts uninitialised)."""
    recorder, datamodule, _ = _fit_recorded(tmp_path)
    history = torch.cat(recorder.rows)
    assert history.batch_size[0] <= datamodule.replay.capacity  # nothing was overwritten: history is the truth
    sampled = [record for record in recorder.samples if record[-1] is not None]
    assert len(sampled) > 5
    for record in sampled:
        expected = _expected_sample(history, datamodule.replay, record, datamodule)
        got = record[-1]
        for key in expected.keys(include_nested=True, leaves_only=True):
            assert torch.equal(got[key], expected[key]), key


def _window_episode_means(history: TensorDict, start: int, end: int) -> tuple[float, float]:
    """Mean return/length of the episodes the window of ticks ``[start, end)`` finished (naive loop).

    The collector counts an episode at the tick that produces its terminal row, so the window counts the episodes
    whose terminal row is at ``start + 1 .. end``; length = rows after the reset row.
    """
    last = history[keys.TERMINATED] | history[keys.TRUNCATED]
    returns, lengths = [], []
    for env in range(history.batch_size[1]):
        ret, count, open_ = 0.0, 0, False
        for t in range(history.batch_size[0]):
            if bool(history[keys.IS_FIRST][t, env]):
                ret, count, open_ = 0.0, 0, True
            ret += float(history[keys.REWARD][t, env])
            count += 1
            if bool(last[t, env]) and open_:
                if start < t <= end:
                    returns.append(ret)
                    lengths.append(count - 1)
                open_ = False
    if not returns:
        return float("nan"), float("nan")
    return sum(returns) / len(returns), sum(lengths) / len(lengths)


def test_episode_stats_count_every_tick_of_a_busy_actor_window(tmp_path):
    """Episode sums are added on the actor stream (late, it sleeps) and read and reset on the learner stream: the
    stats a cycle reports must be exactly the previous window's finished episodes."""
    recorder, _, _ = _fit_recorded(tmp_path)
    history = torch.cat(recorder.rows)
    checked = 0
    for (start, end), stats in zip(recorder.windows[:-1], recorder.stats[1:], strict=True):
        if end + 1 > history.batch_size[0]:
            break
        want_return, want_length = _window_episode_means(history, start, end)
        got_return, got_length = stats["rollout/episode_return"], stats["rollout/episode_length"]
        if want_return != want_return:  # NaN: no episode ended in that window
            assert got_return != got_return
            continue
        assert got_return == pytest.approx(want_return, rel=1e-5)
        assert got_length == pytest.approx(want_length, rel=1e-5)
        checked += 1
    assert checked >= 5


def test_async_and_sync_engines_write_identical_rows_for_a_fixed_seed(tmp_path):
    """Weight-independent actions, same seed: the async engine (actor stream, busy) and the synchronous one must
    write the same rows; only the policy version column differs (they take gradient steps on different cycles)."""
    # 64 env steps (48 after the warm-up) rather than 160: two fits, and under the sanitizer each kernel is tracked
    short = {"random_actions": True, "total_env_steps": 64}
    async_rec, async_dm, _ = _fit_recorded(tmp_path / "async", "cuda_async", **short)
    sync_rec, sync_dm, _ = _fit_recorded(tmp_path / "sync", "cpu", **short)
    assert async_dm.async_engine
    assert not sync_dm.async_engine
    rows_async, rows_sync = torch.cat(async_rec.rows), torch.cat(sync_rec.rows)
    assert rows_async.batch_size == rows_sync.batch_size
    for key in rows_sync.keys(include_nested=True, leaves_only=True):
        if key != keys.POLICY_VERSION:
            assert torch.equal(rows_async[key], rows_sync[key]), key
    ring_async = async_dm.replay.state_dict(include_storage=True)
    ring_sync = sync_dm.replay.state_dict(include_storage=True)
    written = ring_sync["size"]
    assert ring_async["size"] == written
    for key, value in ring_sync["storage"].items():
        if key != keys.POLICY_VERSION:
            assert torch.equal(ring_async["storage"][key][:written], value[:written]), key


def _assert_same_state(mid: Any, synced: Any, path: str = "state") -> None:
    if isinstance(synced, torch.Tensor):
        assert torch.equal(mid, synced), path
    elif isinstance(synced, dict):
        assert mid.keys() == synced.keys(), path
        for key in synced:
            _assert_same_state(mid[key], synced[key], f"{path}.{key}")
    elif isinstance(synced, list | tuple):
        assert len(mid) == len(synced), path
        for i, (a, b) in enumerate(zip(mid, synced, strict=True)):
            _assert_same_state(a, b, f"{path}[{i}]")
    else:
        assert mid == synced, path


class _MidCollectionCheckpoint(pl.Callback):
    """Takes the datamodule's checkpoint state while the cycle's actor window is still running, then again after
    a full device synchronize; the two must be identical."""

    def __init__(self, at_update: int = 4) -> None:
        self.at_update = at_update
        self.compared = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.updates != self.at_update or self.compared:
            return
        dm = trainer.datamodule
        mid = dm.state_dict()
        torch.cuda.synchronize()
        _assert_same_state(mid, dm.state_dict())
        self.compared = True


def test_checkpoint_mid_collection_equals_a_synchronised_one(tmp_path):
    model, datamodule = tiny_dreamer(
        CartPole(max_episode_steps=8), total_env_steps=160, learning_starts=16, save_replay=True
    )
    _slow_actor(datamodule, cycles=20 * TICK_SLEEP)  # the window is far from done when the checkpoint is taken
    probe = _MidCollectionCheckpoint()
    trainer(tmp_path, callbacks=[probe], accelerator="gpu").fit(model, datamodule)
    assert probe.compared


def test_actor_window_reads_whole_weight_versions_while_the_copy_is_delayed():
    """Window 1 reads the actor copy late (its stream sleeps); the learner's next step and the copy are delayed
    too. Window 1 must see only the old weights (the copy waits for it) and window 2 only the new ones (it waits on
    ``policy_ready_event``), each read made by the engine's own ``_actor_window``."""
    model, datamodule = tiny_dreamer(device="cuda", learning_starts=0, rollout_length=4, commit_stride=2)
    model = model.cuda()
    sync = CUDAStreamWeightSync()
    sync.on_fit_start(None, model)  # type: ignore[arg-type]
    datamodule.setup("fit")
    learner_param = next(model.acting_networks().parameters())
    actor_param = next(model.actor_networks.parameters())
    seen: list[list[torch.Tensor]] = [[], []]
    window = 0
    policy = datamodule._policy

    def reading_policy(module: Any) -> Any:
        player = policy(module)

        def act(view: TensorDict, generator: torch.Generator) -> TensorDict:
            torch.cuda._sleep(20 * TICK_SLEEP)
            seen[window].append(actor_param.clone())  # a read of the weights, late on the actor stream
            return player(view, generator)

        return act

    datamodule._policy = reading_policy
    old = actor_param.detach().clone()
    torch.cuda.synchronize()
    datamodule._actor_window(model)  # window 1, queued behind its sleeps
    torch.cuda._sleep(40 * TICK_SLEEP)  # the learner is busy too: the copy runs late
    with torch.no_grad():
        learner_param.add_(1.0)  # the "optimizer step"
    model.policy_version += 1
    sync.hand_off(model, datamodule.actor_stream)
    window = 1
    datamodule._actor_window(model)  # window 2
    torch.cuda.synchronize()
    assert len(seen[0]) == len(seen[1]) == 4
    for weights in seen[0]:
        torch.testing.assert_close(weights, old, rtol=0, atol=0)
    for weights in seen[1]:
        torch.testing.assert_close(weights, learner_param, rtol=0, atol=0)
    sync.on_fit_end(None, model)  # type: ignore[arg-type]
    datamodule.teardown("fit")


def test_weights_are_copied_after_the_learner_step_and_before_the_event():
    """A long kernel delays the learner's in-place update; the copy must still see the new values."""
    model, _ = tiny_dreamer()
    model = model.cuda()
    sync = CUDAStreamWeightSync()
    sync.on_fit_start(None, model)  # type: ignore[arg-type]
    params = list(model.acting_networks().parameters())
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time on the learner (current) stream
    with torch.no_grad():
        torch._foreach_add_(params, 1.0)  # the "optimizer step", queued behind the sleep
    model.policy_version += 1
    sync.hand_off(model)
    model.policy_ready_event.synchronize()
    for learner, actor in zip(params, model.actor_networks.parameters(), strict=True):
        torch.testing.assert_close(actor, learner)
    assert model.actor_version == model.policy_version
    sync.on_fit_end(None, model)  # type: ignore[arg-type]
    assert model.actor_networks is None


def test_learner_step_after_a_hand_off_does_not_change_the_copy_being_made():
    """The copy reads the learner's weights on the side stream: the learner's next step must wait for it."""
    model, _ = tiny_dreamer()
    model = model.cuda()
    sync = CUDAStreamWeightSync()
    sync.on_fit_start(None, model)  # type: ignore[arg-type]
    busy_actor = torch.cuda.Stream()
    with torch.cuda.stream(busy_actor):
        torch.cuda._sleep(200_000_000)  # the copy waits for this window, so it runs late
    params = list(model.acting_networks().parameters())
    handed = [p.detach().clone() for p in params]
    model.policy_version += 1
    sync.hand_off(model, busy_actor)
    with torch.no_grad():
        torch._foreach_add_(params, 1.0)  # the next optimiser step, queued right after the hand-off
    torch.cuda.synchronize()
    for want, actor in zip(handed, model.actor_networks.parameters(), strict=True):
        torch.testing.assert_close(actor, want, rtol=0, atol=0)
    sync.on_fit_end(None, model)  # type: ignore[arg-type]


def _overlaps(tmp_path, engine: str) -> list[float]:
    recorder, _, model = _fit_recorded(  # ~10 ms of GPU sleep per tick: the actor window is GPU-bound
        tmp_path, engine, cycles=10 * TICK_SLEEP, total_env_steps=480, rollout_length=8, commit_stride=4,
        replay_ratio=0.25,
    )  # fmt: skip
    assert model.updates > 10
    values = [s["perf/overlap_eff"] for s in recorder.stats if "perf/overlap_eff" in s]
    assert len(values) > 10
    return values[len(values) // 2 :]  # steady state


def test_async_engine_overlaps_actor_and_learner(tmp_path):
    """With a GPU-bound actor window (it sleeps) the async engine hides it behind the learner's update; the
    synchronous engine, which runs both on one stream, cannot."""
    overlap_async = statistics.median(_overlaps(tmp_path / "async", "cuda_async"))
    overlap_sync = statistics.median(_overlaps(tmp_path / "sync", "cpu"))
    print(f"perf/overlap_eff median: async {overlap_async:.2f}, sync {overlap_sync:.2f}")
    assert overlap_async > 0.0
    assert overlap_async > overlap_sync


def _tests_to_sanitize() -> list[str]:
    """Every test of this file but the sanitizer's own and the timing check (the sanitizer slows streams unevenly)."""
    return [
        name
        for name, value in globals().items()
        if name.startswith("test_") and callable(value) and "sanitizer" not in name and "overlaps" not in name
    ]


@pytest.mark.parametrize("name", _tests_to_sanitize())
def test_cuda_tests_pass_under_the_cuda_sanitizer(name):
    """Each test above again, in a subprocess with ``TORCH_CUDA_SANITIZER=1``: any unsynchronised access of a
    tensor from two streams (the hazards above, and any this file does not delay for) fails the run. One subprocess
    per test, so pytest-xdist spreads them over its workers."""
    root = Path(__file__).resolve().parents[1]
    path = [str(root), str(root / "tests"), os.environ.get("PYTHONPATH", "")]  # the caller's path too (site dirs)
    env = {**os.environ, "TORCH_CUDA_SANITIZER": "1", "PYTHONPATH": os.pathsep.join(filter(None, path))}
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist",
               f"{__file__}::{name}"]  # fmt: skip
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    output = done.stdout + done.stderr
    assert "CSAN" not in output, output[-6000:]
    assert done.returncode == 0, output[-6000:]
    assert "1 passed" in output, output[-6000:]
