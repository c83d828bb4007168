"""The overview's heat map, drawn on the server as inline SVG (time series are
:mod:`gpuwatch.web.charts`, drawn by uPlot in the browser).

Pure functions from numbers to SVG text (escaped), no state. Colours are fixed so a
screenshot test can look for them: the heat map runs red (idle) → amber → green (busy).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from html import escape
from itertools import pairwise

NO_DATA = "#e8e8e8"
#: heat-map stops: (ratio, (r, g, b))
HEAT_STOPS = ((0.0, (215, 48, 39)), (0.5, (254, 224, 139)), (1.0, (26, 152, 80)))


def heat_colour(value: float | None) -> str:
    """Utilization 0..1 as a colour: red when idle, amber at half, green when busy."""
    if value is None:
        return NO_DATA
    v = min(1.0, max(0.0, value))
    for (x0, c0), (x1, c1) in pairwise(HEAT_STOPS):
        if v <= x1:
            f = (v - x0) / (x1 - x0)
            r, g, b = (round(a + (b_ - a) * f) for a, b_ in zip(c0, c1, strict=True))
            return f"#{r:02x}{g:02x}{b:02x}"
    return "#{:02x}{:02x}{:02x}".format(*HEAT_STOPS[-1][1])


def _tick_step(span: timedelta, max_ticks: int = 8) -> timedelta:
    for minutes in (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440):
        if span / timedelta(minutes=minutes) <= max_ticks:
            return timedelta(minutes=minutes)
    return timedelta(days=max(1, int(span / timedelta(days=1) / max_ticks) + 1))


def _ticks(t0: datetime, t1: datetime) -> list[datetime]:
    step = _tick_step(t1 - t0)
    epoch = t0.replace(hour=0, minute=0, second=0, microsecond=0)
    k = -((epoch - t0) // step)  # first multiple of step at or after t0
    out, t = [], epoch + k * step
    while t <= t1:
        out.append(t)
        t += step
    return out


def heatmap(
    rows: Sequence[str],
    start: datetime,
    minutes: int,
    values: dict[tuple[int, int], float],
    *,
    width: int = 1180,
    cell_h: int = 12,
    label_w: int = 150,
    title: str = "",
    links: Sequence[str] | None = None,
) -> str:
    """``values[(row, minute offset)]`` (0..1) as coloured cells; missing cells grey; each row's
    label links to ``links[row]`` when given."""
    cell_w = (width - label_w - 10) / max(1, minutes)
    top, bottom = 8, 34
    height = top + cell_h * len(rows) + bottom
    parts = [
        f'<svg class="chart heatmap" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
    ]
    for i, label in enumerate(rows):
        y = top + i * cell_h
        text = (
            f'<text x="{label_w - 6}" y="{y + cell_h - 2}" text-anchor="end" class="lbl">'
            f"{escape(label)}</text>"
        )
        parts.append(f'<a href="{escape(links[i])}">{text}</a>' if links else text)
        for m in range(minutes):
            v = values.get((i, m))
            parts.append(
                f'<rect x="{label_w + m * cell_w:.1f}" y="{y}" width="{cell_w + 0.3:.1f}" '
                f'height="{cell_h - 1}" '
                f'fill="{heat_colour(v)}"><title>{escape(label)} '
                f"{(start + timedelta(minutes=m)):%H:%M}: {'no data' if v is None else f'{100 * v:.0f}%'}"
                "</title></rect>"
            )
    base = top + cell_h * len(rows)
    end = start + timedelta(minutes=minutes)
    for t in _ticks(start, end):
        x = label_w + (t - start) / timedelta(minutes=1) * cell_w
        parts.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" class="axis"/>')
        parts.append(f'<text x="{x:.1f}" y="{base + 16}" text-anchor="middle" class="lbl">{t:%H:%M}</text>')
    # legend
    lx = width - 230
    for k in range(11):
        parts.append(
            f'<rect x="{lx + k * 14}" y="{base + 20}" width="14" height="10" fill="{heat_colour(k / 10)}"/>'
        )
    parts.append(f'<text x="{lx - 6}" y="{base + 29}" text-anchor="end" class="lbl">util 0%</text>')
    parts.append(f'<text x="{lx + 160}" y="{base + 29}" class="lbl">100%</text>')
    parts.append("</svg>")
    return "".join(parts)
