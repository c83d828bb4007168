"""``gpuwatch job ID --plot FILE.png``: the job's GPU utilization over time, drawn by matplotlib.

A picture someone can paste into a ticket: a title naming the job and its verdict, UTC times
on the x axis with ticks matplotlib fits to the span, utilization in percent on the y axis,
one coloured line per GPU with a legend, a gap where a GPU sent nothing. matplotlib is the
optional extra ``plot`` (``pip install 'gpuwatch[plot]'``): compute nodes run the agent and
never need it. The figure is built with matplotlib's object API (no ``pyplot`` global state),
so drawing is safe in any thread.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: what the CLI says when the extra is not installed
MISSING = "--plot needs matplotlib: pip install 'gpuwatch[plot]'"


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def utilization_figure(
    title: str,
    start: datetime,
    step_s: float,
    series: Mapping[str, Sequence[float | None]],
    *,
    faults: Mapping[str, str] | None = None,
    width_px: int = 1000,
    height_px: int = 420,
) -> Figure:
    """The chart: ``series`` (label -> values 0..1, None = no data), value ``i`` drawn at the
    middle of its column, ``start + (i + 0.5) * step_s``. ``faults``: label -> a short note
    (``XID 79, lost``) for a GPU that faulted: a red cross where its line ends, the note in
    its legend entry."""
    try:
        from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
        from matplotlib.figure import Figure
        from matplotlib.ticker import PercentFormatter
    except ImportError as exc:
        raise PlotUnavailable(MISSING) from exc
    dpi = 100
    figure = Figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi, layout="constrained")
    axes = figure.add_subplot()
    faults = faults or {}
    for label, values in series.items():
        times = [start + timedelta(seconds=(i + 0.5) * step_s) for i in range(len(values))]
        note = faults.get(label)
        axes.plot(
            times,
            [math.nan if v is None else v for v in values],
            label=label if note is None else f"{label} ({note})",
            linewidth=1.6,
        )
        last = max((i for i, v in enumerate(values) if v is not None), default=None)
        if note is not None and last is not None:
            axes.plot([times[last]], [values[last]], marker="X", markersize=9, color="#c0392b", zorder=5)
    axes.set_title(title, loc="left", fontsize=11)
    axes.set_ylabel("GPU utilization")
    axes.set_xlabel("time (UTC)")
    axes.set_ylim(0, 1.02)
    axes.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    locator = AutoDateLocator(tz=timezone.utc, maxticks=10)
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=timezone.utc))
    axes.grid(True, color="#e5e5e5", linewidth=0.8)
    if series:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, title="GPU")
    else:
        axes.text(0.5, 0.5, "no GPU data", transform=axes.transAxes, ha="center", color="#777")
    return figure


def write_png(figure: Figure, path: Path) -> None:
    """The figure as PNG at ``path``; OSError as the file system says (no folder, full disk)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)
    with open(path, "wb") as out:
        figure.savefig(out, format="png")
