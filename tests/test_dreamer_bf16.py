"""DreamerV3 under ``trainer.precision: bf16-mixed`` on the CPU (the official code's bfloat16 compute): the networks'
matmuls run in bfloat16, every head hands float32 logits to the distributions and losses, and training runs."""

from __future__ import annotations

import torch
from helpers import tiny_dreamer, trainer

from rl_lightning.networks.dreamer_nets import Head


def test_dreamer_trains_in_bf16_mixed_with_float32_heads(tmp_path):
    torch.manual_seed(0)
    module, datamodule = tiny_dreamer(total_env_steps=48)
    trunk_dtypes: set[torch.dtype] = set()
    head_dtypes: set[torch.dtype] = set()
    for head in (m for m in module.modules() if isinstance(m, Head)):
        head.out.register_forward_hook(lambda m, i, o: trunk_dtypes.add(o.dtype) if torch.is_grad_enabled() else None)
        head.register_forward_hook(lambda m, i, o: head_dtypes.add(o.dtype) if torch.is_grad_enabled() else None)
    trainer(tmp_path, precision="bf16-mixed").fit(module, datamodule)
    assert module.updates >= 1
    assert trunk_dtypes == {torch.bfloat16}  # the learner's matmuls ran in bfloat16
    assert head_dtypes == {torch.float32}  # what the distributions read
    metrics = module.last_metrics
    losses = {k: float(v) for k, v in metrics.items() if "loss" in k}
    assert losses
    assert all(torch.isfinite(torch.tensor(v)) for v in losses.values()), losses
    assert all(p.dtype == torch.float32 for p in module.parameters())  # weights and optimiser state stay float32
