"""Inline SVG charts drawn on the server: a heat map and time-series line charts.

Pure functions from numbers to SVG text (escaped), no state. Colours are fixed so a
screenshot test can look for them: the heat map runs red (idle) → amber → green (busy),
lines take :data:`PALETTE` in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape
from itertools import pairwise

#: line colours, in order (Tableau 10)
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
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
) -> str:
    """``values[(row, minute offset)]`` (0..1) as coloured cells; missing cells grey."""
    cell_w = (width - label_w - 10) / max(1, minutes)
    top, bottom = 8, 34
    height = top + cell_h * len(rows) + bottom
    parts = [
        f'<svg class="chart heatmap" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
    ]
    for i, label in enumerate(rows):
        y = top + i * cell_h
        parts.append(
            f'<text x="{label_w - 6}" y="{y + cell_h - 2}" text-anchor="end" class="lbl">'
            f"{escape(label)}</text>"
        )
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


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[datetime, float | None]]
    colour: str = ""


def line_chart(
    title: str,
    series: Sequence[Series],
    start: datetime,
    end: datetime,
    *,
    y_max: float | None = None,
    y_format: Callable[[float], str] = lambda v: f"{100 * v:.0f}%",
    width: int = 560,
    height: int = 200,
) -> str:
    """Time series as polylines (a gap where a value is None); y from 0 to ``y_max``."""
    left, right, top, bottom = 44, 8, 22, 56
    pw, ph = width - left - right, height - top - bottom
    values = [v for s in series for _, v in s.points if v is not None]
    top_value = y_max if y_max is not None else max(values, default=1.0) * 1.1 or 1.0
    span = max((end - start).total_seconds(), 1.0)

    def x(t: datetime) -> float:
        return left + min(max((t - start).total_seconds() / span, 0.0), 1.0) * pw

    def y(v: float) -> float:
        return top + ph - min(v, top_value) / top_value * ph

    parts = [
        f'<svg class="chart line" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<text x="{left}" y="14" class="title">{escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="plot"/>',
    ]
    for k in range(5):
        v = top_value * k / 4
        parts.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + pw}" y2="{y(v):.1f}" class="grid"/>')
        parts.append(
            f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end" class="lbl">{y_format(v)}</text>'
        )
    label = "%m-%d" if end - start > timedelta(days=2) else "%H:%M"  # weeks: dates, not midnights
    for t in _ticks(start, end):
        parts.append(
            f'<text x="{x(t):.1f}" y="{top + ph + 14}" text-anchor="middle" class="lbl">{t:{label}}</text>'
        )
    for i, s in enumerate(series):
        colour = s.colour or PALETTE[i % len(PALETTE)]
        runs: list[list[str]] = [[]]
        for t, v in s.points:
            if v is None:
                runs.append([])
            else:
                runs[-1].append(f"{x(t):.1f},{y(v):.1f}")
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{colour}"/>')
            elif run:
                parts.append(
                    f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(run)}">'
                    f"<title>{escape(s.label)}</title></polyline>"
                )
    # legend
    lx, ly = left, top + ph + 28
    for i, s in enumerate(series[:8]):
        colour = s.colour or PALETTE[i % len(PALETTE)]
        parts.append(f'<rect x="{lx}" y="{ly - 8}" width="10" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{lx + 13}" y="{ly + 1}" class="lbl">{escape(s.label)}</text>')
        lx += 18 + 6 * len(s.label)
        if lx > width - 60:
            lx, ly = left, ly + 13
    if len(series) > 8:
        parts.append(f'<text x="{lx}" y="{ly + 1}" class="lbl">+{len(series) - 8} more</text>')
    if not values:
        parts.append(
            f'<text x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle" class="lbl">no data</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
