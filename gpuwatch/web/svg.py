"""The overview's heat map, drawn on the server as inline SVG (time series are
:mod:`gpuwatch.web.charts`, drawn by uPlot in the browser).

Pure functions from numbers to SVG text (escaped), no state. Colours are fixed so a
screenshot test can look for them: the heat map runs red (idle) → amber → green (busy).
"""

from __future__ import annotations

import base64
import struct
import zlib
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
    cell_h: int | None = None,
    label_w: int = 150,
    title: str = "",
    links: Sequence[str] | None = None,
) -> str:
    """``values[(row, minute offset)]`` (0..1) as coloured cells; missing cells grey; each row
    links to ``links[row]`` when given.

    The cells are one PNG (a pixel per row and minute, stretched without smoothing), so the
    page grows with the rows, not with rows x minutes: 1,000 nodes x 60 minutes is a few tens
    of kB, where a ``<rect>`` per cell was megabytes. Rows are 12 px tall up to 60 rows, then
    thinner (at least 3 px); labels are drawn where rows are tall enough to read, and every
    row has its name and mean in a tooltip."""
    n = len(rows)
    if cell_h is None:
        cell_h = 12 if n <= 60 else max(3, 720 // max(n, 1))
    plot_w = width - label_w - 10
    top, bottom = 8, 34
    height = top + cell_h * n + bottom
    shades, totals, counts = _shades(n, minutes, values)
    image = _cells_png(n, minutes, shades)
    parts = [
        f'<svg class="chart heatmap" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<image x="{label_w}" y="{top}" width="{plot_w}" height="{cell_h * n}" preserveAspectRatio="none" '
        f'style="image-rendering:pixelated" href="data:image/png;base64,{base64.b64encode(image).decode()}"'
        "/>",
    ]
    for i, label in enumerate(rows):
        y = top + i * cell_h
        total, count = totals[i], counts[i]
        mean = f"{100 * total / count:.0f}%" if count else "no data"
        hit = (
            f'<rect x="0" y="{y}" width="{label_w + plot_w}" height="{cell_h}" fill="transparent">'
            f"<title>{escape(label)}: mean {mean} over the span</title></rect>"
        )
        if cell_h >= 9:
            hit += (
                f'<text x="{label_w - 6}" y="{y + cell_h - 2}" text-anchor="end" class="lbl">'
                f"{escape(label)}</text>"
            )
        parts.append(f'<a href="{escape(links[i])}">{hit}</a>' if links else hit)
    base = top + cell_h * n
    end = start + timedelta(minutes=minutes)
    for t in _ticks(start, end):
        x = label_w + (t - start) / timedelta(minutes=1) * plot_w / max(1, minutes)
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


#: the shade of a cell with no data; shades 0..100 are whole percents of :func:`heat_colour`
_NO_DATA_SHADE = 101
#: each shade's red, green and blue byte, as :meth:`bytes.translate` tables
_CHANNELS = tuple(
    bytes(bytes.fromhex(heat_colour(k / 100)[1:])[c] for k in range(101))
    + bytes.fromhex(NO_DATA[1:])[c : c + 1]
    + bytes(256 - 102)
    for c in range(3)
)


def _shades(
    rows: int, minutes: int, values: dict[tuple[int, int], float]
) -> tuple[bytearray, list[float], list[int]]:
    """One pass over the cells: each in-span cell's shade (its percent, rounded; a byte per cell,
    row after row), and each row's sum and count of values for its mean. One byte per cell
    here and the colours filled in by :meth:`bytes.translate` keep the per-cell Python work to
    a lookup and a store (60,000 cells at 1,000 nodes)."""
    shades = bytearray([_NO_DATA_SHADE]) * (rows * minutes)
    totals, counts = [0.0] * rows, [0] * rows
    for (r, m), v in values.items():
        totals[r] += v
        counts[r] += 1
        if 0 <= m < minutes:
            shades[r * minutes + m] = 0 if v <= 0 else 100 if v >= 1 else int(100 * v + 0.5)
    return shades, totals, counts


def _cells_png(rows: int, minutes: int, shades: bytearray) -> bytes:
    """A ``minutes`` x ``rows`` RGB PNG, a pixel per cell in :func:`heat_colour` of its shade."""
    rgb = bytearray(3 * len(shades))
    for c, table in enumerate(_CHANNELS):
        rgb[c::3] = shades.translate(table)
    width = 3 * minutes
    # each row: filter type "none", then its pixels
    raw = b"".join(b"\x00" + rgb[at : at + width] for at in range(0, len(rgb), width)) if width else b""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", max(1, minutes), max(1, rows), 8, 2, 0, 0, 0)  # 8-bit RGB
    if not (rows and minutes):
        raw = b"\x00" + bytes.fromhex(NO_DATA[1:])
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
