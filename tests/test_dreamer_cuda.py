"""DreamerV3 on CUDA: async engine smoke, weight hand-off ordering, no host sync in the hot loops (skip without GPU)."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from helpers import tiny_dreamer, trainer

from rl_lightning.callbacks import CUDAStreamWeightSync

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


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
        storage = dm.replay.state_dict(include_storage=False)
        assert storage["size"] > 0
        for value in dm.replay._storage.values(include_nested=True, leaves_only=True):
            assert value.is_cuda
        batches = dm._sample(1)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
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
    metrics = model.last_metrics
    print("perf/overlap_eff", float(metrics.get("perf/overlap_eff", float("nan"))))
    for key in ("perf/actor_ms", "perf/learner_ms", "policy/actor_version", "replay/committed_t"):
        assert key in metrics


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


def test_actor_stream_waits_for_the_policy_ready_event():
    """Work queued on the actor stream after ``wait_event`` sees the copied weights, not the old ones."""
    model, _ = tiny_dreamer()
    model = model.cuda()
    sync = CUDAStreamWeightSync()
    sync.on_fit_start(None, model)  # type: ignore[arg-type]
    actor_stream = torch.cuda.Stream()
    learner_param = next(model.acting_networks().parameters())
    actor_param = next(model.actor_networks.parameters())
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)
    with torch.no_grad():
        learner_param.add_(5.0)
    sync.hand_off(model, actor_stream)
    with torch.cuda.stream(actor_stream):
        actor_stream.wait_event(model.policy_ready_event)
        seen = actor_param.clone()
    actor_stream.synchronize()
    torch.testing.assert_close(seen, learner_param)
