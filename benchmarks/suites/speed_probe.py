"""How fast this machine is right now, in one number a results page can print beside a fit's wall time.

The 2-core machines the suites run on differ up to 4x in speed (and a busy one is slower still), so "Ant took 28
minutes" means little without the speed of the box it ran on. ``reference_step_ms`` times the workload most fits here
are bound by: eager PPO-sized gradient steps (a 64x64 tanh MLP's forward, a squared loss, backward and a plain
gradient step on 64 rows, one torch thread; not ``torch.optim``, whose first use imports torch's compiler, ~2.5 s
here), the median of 5 blocks of 100 steps, under a second in all. The suite runner takes it just before
each fit and records it beside the fit's wall time; a page shows its range over the runs it draws.
"""

from __future__ import annotations

import statistics
import time

import torch


def reference_step_ms(blocks: int = 5, steps: int = 100) -> float:
    """Milliseconds per reference gradient step (median over ``blocks`` of ``steps``), on one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        generator = torch.Generator().manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Linear(27, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 9)
        )
        params = list(net.parameters())
        x, y = torch.randn(64, 27, generator=generator), torch.randn(64, 9, generator=generator)

        def step() -> None:
            loss = (net(x) - y).pow(2).mean()
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                torch._foreach_add_(params, grads, alpha=-1e-4)

        for _ in range(20):  # warm-up: allocator, first-call dispatch
            step()
        times = []
        for _ in range(blocks):
            start = time.perf_counter()
            for _ in range(steps):
                step()
            times.append((time.perf_counter() - start) / steps * 1e3)
        return round(statistics.median(times), 3)
    finally:
        torch.set_num_threads(threads)
