"""Time-series charts of the web view, drawn in the browser by uPlot.

uPlot (MIT, vendored in ``static/`` with its licence) draws axes whose ticks it chooses to fit,
date or time labels by the span, a legend with each series' value under the cursor, and
zoom by dragging; ``static/charts.js`` turns each chart's data into a uPlot. The server's part
is here: :func:`line_chart` writes one ``<figure class="chart line">`` whose ``data-chart``
attribute holds the data as JSON — x in epoch seconds, one value array per series aligned on
it (``null`` where a series has no value: the line breaks), the y unit (:data:`UNITS`), the
y maximum, the window's start and end. Pure functions from numbers to HTML, no state; the
heat map stays inline SVG (:mod:`gpuwatch.web.svg`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from pathlib import Path

#: line colours, in order (Tableau 10)
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
#: how the y axis and the legend write a value: 0..1 as percent, a plain number, a byte rate
UNITS = ("pct", "count", "bytes_per_s")
#: the files the pages load, served from ``/static/`` (``static/uPlot.LICENSE`` is uPlot's licence)
STATIC_DIR = Path(__file__).parent / "static"
ASSETS = ("uPlot.iife.min.js", "uPlot.min.css", "charts.js")


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[datetime, float | None]]
    colour: str = ""


def _epoch(t: datetime) -> int:
    return int(t.timestamp())


def chart_data(
    series: Sequence[Series],
    start: datetime,
    end: datetime,
    *,
    y_max: float | None,
    unit: str,
    width: int,
    height: int,
) -> dict:
    """The JSON a chart's figure carries: the series aligned on the union of their times."""
    if unit not in UNITS:
        raise ValueError(f"unit {unit!r} is not one of {UNITS}")
    xs = sorted({_epoch(t) for s in series for t, _ in s.points})
    index = {x: i for i, x in enumerate(xs)}
    lines = []
    for i, s in enumerate(series):
        values: list[float | None] = [None] * len(xs)
        for t, v in s.points:
            values[index[_epoch(t)]] = None if v is None else round(float(v), 6)
        lines.append({"label": s.label, "colour": s.colour or PALETTE[i % len(PALETTE)], "values": values})
    return {
        "x": xs,
        "series": lines,
        "start": _epoch(start),
        "end": _epoch(end),
        "y_max": y_max,
        "unit": unit,
        "width": width,
        "height": height,
    }


def line_chart(
    title: str,
    series: Sequence[Series],
    start: datetime,
    end: datetime,
    *,
    y_max: float | None = None,
    unit: str = "pct",
    width: int = 560,
    height: int = 200,
) -> str:
    """One chart: a figure with its title, drawn by ``charts.js``; "no data" when no series
    has a value."""
    data = chart_data(series, start, end, y_max=y_max, unit=unit, width=width, height=height)
    empty = all(v is None for s in data["series"] for v in s["values"])
    attribute = escape(json.dumps(data, separators=(",", ":")), quote=True)
    return (
        f'<figure class="chart line" style="width:{width}px" data-chart="{attribute}">'
        f"<figcaption>{escape(title)}</figcaption>"
        + ('<p class="nodata">no data</p>' if empty else "")
        + '<div class="plot"></div></figure>'
    )


def page_head() -> str:
    """The stylesheet link for a page's ``<head>``."""
    return '<link rel="stylesheet" href="/static/uPlot.min.css">'


def page_scripts() -> str:
    """The scripts that draw a page's charts, for the end of its ``<body>``."""
    return '<script src="/static/uPlot.iife.min.js"></script><script src="/static/charts.js"></script>'
