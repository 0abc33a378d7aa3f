"""matplotlib figures (Agg, through ``Figure.savefig``: no pyplot, no global backend): curves and the aggregate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rl_lightning.results.aggregate import Aggregate
from rl_lightning.results.curves import Band
from rl_lightning.results.options import Reference

#: Pixels per inch of every figure: ``--size`` is in pixels, the figure in inches.
DPI = 100


@dataclass(frozen=True)
class Curve:
    """One group's band on one panel; ``dashed`` for a peer's runs (``--reference-runs``)."""

    name: str
    band: Band
    dashed: bool = False


#: Published figures' lines: greys and dashes unlike the runs' solid coloured curves, each reference its own.
REFERENCE_COLOURS = ("0.2", "0.45", "0.65", "0.35")
REFERENCE_DASHES = ((0, (1, 2)), (0, (4, 2)), (0, (6, 2, 1, 2)), (0, (2, 4)))


def curves(
    title: str,
    metric: str,
    drawn: Sequence[Curve],
    references: Sequence[Reference],
    size: tuple[int, int],
    stem: Path,
    ci: float,
    log_y: bool = False,
) -> list[Path]:
    """Two panels, ``metric`` against env steps and against wall time (the seeds' mean time to reach each env step),
    ``references`` as horizontal lines on both, the metric on a log axis with ``log_y``; written as ``stem.png``
    and ``stem.svg``."""
    figure = _figure(size)
    steps_axes, wall_axes = figure.subplots(1, 2, sharey=True)
    scale, unit = _time_unit(max((float(c.band.wall.max()) for c in drawn), default=0.0))
    for axes, x_of in ((steps_axes, lambda band: band.x), (wall_axes, lambda band: band.wall / scale)):
        for index, curve in enumerate(drawn):
            _draw(axes, curve, f"C{index}", x_of(curve.band))
        for index, ref in enumerate(references):
            axes.axhline(
                ref.value,
                color=REFERENCE_COLOURS[index % len(REFERENCE_COLOURS)],  # told apart by colour and dash both
                linestyle=REFERENCE_DASHES[index % len(REFERENCE_DASHES)],
                linewidth=1.2,
                label=f"{ref.name} ({ref.value:g})",
            )
        axes.grid(alpha=0.3)
    if log_y:  # the axes share y: one call sets both
        steps_axes.set_yscale("log")
    steps_axes.set(xlabel="env steps", ylabel=metric)
    wall_axes.set(xlabel=f"wall time ({unit})")
    steps_axes.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
    steps_axes.legend(fontsize="small", title=f"mean, {ci:.0%} bootstrap CI", title_fontsize="small")
    figure.suptitle(title)
    return _save(figure, stem)


def aggregate(rows: Sequence[Aggregate], metric: str, size: tuple[int, int], stem: Path, ci: float) -> list[Path]:
    """The IQM of each algorithm with its interval, one row each; written as ``stem.png`` and ``stem.svg``."""
    figure = _figure(size)
    axes = figure.subplots()
    for index, row in enumerate(rows):
        axes.errorbar(
            row.iqm,
            index,
            xerr=[[row.iqm - row.low], [row.high - row.iqm]],
            fmt="o",
            color=f"C{index}",
            capsize=6,
            linewidth=2,
        )
    axes.axvline(0.0, color="0.5", linestyle=":", linewidth=1, label="0: the low end of each range (random)")
    axes.axvline(1.0, color="0.3", linestyle="--", linewidth=1, label="1: the high end (the reference)")
    axes.legend(loc="best", fontsize="small")
    axes.set_yticks(range(len(rows)), [row.algorithm for row in rows])
    axes.set_ylim(-0.6, len(rows) - 0.4)
    axes.invert_yaxis()
    tasks = ", ".join(rows[0].tasks) if rows else ""
    axes.set(xlabel=f"IQM of normalised final {metric} ({ci:.0%} stratified bootstrap CI)", title=tasks)
    axes.grid(axis="x", alpha=0.3)
    return _save(figure, stem)


def _figure(size: tuple[int, int]):  # -> matplotlib.figure.Figure (an optional import)
    from matplotlib.figure import Figure

    return Figure(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI, layout="constrained")


def _draw(axes, curve: Curve, color: str, x: np.ndarray) -> None:
    band = curve.band
    label = f"{curve.name} ({band.seeds} seed{'s' if band.seeds != 1 else ''})"
    marker = "o" if len(x) <= 30 else None  # a few evaluations: show where the points are
    style = "--" if curve.dashed else "-"
    axes.plot(x, band.mean, style, color=color, label=label, marker=marker, markersize=4, linewidth=1.8)
    axes.fill_between(x, band.low, band.high, color=color, alpha=0.2, linewidth=0)


def _time_unit(seconds: float) -> tuple[float, str]:
    if seconds >= 3 * 3600:
        return 3600.0, "h"
    if seconds >= 3 * 60:
        return 60.0, "min"
    return 1.0, "s"


def _save(figure, stem: Path) -> list[Path]:
    paths = [Path(f"{stem}.png"), Path(f"{stem}.svg")]
    import matplotlib

    # No bbox_inches="tight": the PNG keeps the asked size. No date and fixed ids in the SVG: the same runs give the
    # same files, byte for byte.
    figure.savefig(paths[0], dpi=DPI)
    with matplotlib.rc_context({"svg.hashsalt": "rl_lightning"}):
        figure.savefig(paths[1], dpi=DPI, metadata={"Date": None})
    return paths
