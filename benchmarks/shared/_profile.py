"""``--profile``: where a fit's time goes, per part of the loop, from one short run under cProfile.

A bundled config is fitted through the CLI's own objects (``build_cli``) for a few updates with cProfile on; the
cumulative time of named functions is read back and printed as a table: each part's milliseconds per update and
its share of the fit. "Lightning and data-module overhead" is whatever the fit spent outside the named parts
(the loop, hooks, the datamodule's iterator, progress bookkeeping). Host syncs are the calls that read a tensor
back to Python (``item``, ``tolist``, ``cpu``, ``numpy``, ``__bool__``), counted per update.

cProfile adds a fixed cost to every Python call, so the shares of Python-heavy parts are inflated; the table is
for finding where time goes, the timed sections of each benchmark for how much there is.
"""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
from _common import build_cli

_SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__")


@dataclass(frozen=True)
class Part:
    """A row of the table: a label, the functions whose cumulative time it is, and its depth (0: top level)."""

    label: str
    functions: Sequence[Callable[..., Any]]
    depth: int = 0


class _StopAfter(pl.Callback):
    def __init__(self, updates: int) -> None:
        self.updates = updates

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if pl_module.updates >= self.updates:
            trainer.should_stop = True


def _key(function: Callable[..., Any]) -> tuple[str, int, str]:
    code = getattr(function, "__wrapped__", function).__code__
    return code.co_filename, code.co_firstlineno, code.co_name


def _cumulative(stats: dict[Any, Any], functions: Sequence[Callable[..., Any]]) -> float:
    return sum(stats[_key(f)][3] for f in functions if _key(f) in stats)


def _host_syncs(stats: dict[Any, Any]) -> int:
    return sum(
        row[1]
        for (_, _, name), row in stats.items()
        if any(f"<method '{m}' of 'torch._C.TensorBase' objects>" == name for m in _SYNC_METHODS)
    )


def profile_fit(
    config: str, parts: Sequence[Part], updates: int = 20, warmup: int = 3, extra: list[str] | None = None
) -> None:
    """Fit ``config`` for ``warmup + updates`` updates, profiling the last ``updates``, and print the table."""
    cli = build_cli(config, seed=0, extra=extra)
    module = cli.model
    profiler = cProfile.Profile()

    class _Window(pl.Callback):
        def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
            if pl_module.updates == warmup:
                profiler.enable()

    cli.trainer.callbacks[:0] = [_Window(), _StopAfter(warmup + updates)]
    cli.trainer.fit(module, cli.datamodule)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(row[2] for row in stats.values())  # all self time in the window = the window's wall on one thread
    print(f"\n== Profile: {config}, {updates} updates after {warmup} warm-up (cProfile; ms per update) ==")
    print(f"  {'part':<52} {'ms/update':>10} {'share':>7}")
    top = 0.0
    for part in parts:
        seconds = _cumulative(stats, part.functions)
        if part.depth == 0:
            top += seconds
        label = "  " * part.depth + part.label
        print(f"  {label:<52} {seconds / updates * 1e3:10.2f} {seconds / total:7.1%}")
    rest = total - top
    print(f"  {'Lightning and data-module overhead (the rest)':<52} {rest / updates * 1e3:10.2f} {rest / total:7.1%}")
    print(f"  {'whole fit window':<52} {total / updates * 1e3:10.2f} {1:7.1%}")
    print(f"  host syncs (item/tolist/cpu/numpy/bool) per update: {_host_syncs(stats) / updates:.1f}")
