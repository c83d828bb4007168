"""A tiny pure-Python line chart written as PNG (stdlib ``zlib`` + ``struct``, no matplotlib).

matplotlib is not a gpuwatch dependency and ``gpuwatch job --plot`` needs one picture: GPU
utilization over time, one coloured line per GPU, on a white canvas with a frame and grid
lines at 0/25/50/75/100 %. No text is drawn (no font); the CLI prints the legend (colour per
GPU) and the time span. Gaps (no data) break the line.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

RGB = tuple[int, int, int]

PALETTE: tuple[RGB, ...] = (
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40),
    (148, 103, 189), (140, 86, 75), (227, 119, 194), (127, 127, 127),
    (188, 189, 34), (23, 190, 207),
)  # fmt: skip
COLOUR_NAMES = ("blue", "orange", "green", "red", "purple", "brown", "pink", "grey", "olive", "cyan")
_WHITE, _GRID, _FRAME = (255, 255, 255), (225, 225, 225), (60, 60, 60)


def encode_png(width: int, height: int, pixels: bytearray) -> bytes:
    """PNG bytes of an 8-bit RGB image; ``pixels`` is row-major RGB, 3 bytes per pixel."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    stride = 3 * width
    raw = b"".join(b"\x00" + bytes(pixels[y * stride : (y + 1) * stride]) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit truecolour
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(_WHITE * (width * height))

    def dot(self, x: int, y: int, colour: RGB) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            i = 3 * (y * self.width + x)
            self.pixels[i : i + 3] = bytes(colour)

    def line(self, x0: int, y0: int, x1: int, y1: int, colour: RGB, thick: int = 1) -> None:
        """Bresenham, ``thick`` pixels tall."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            for t in range(thick):
                self.dot(x0, y0 + t - thick // 2, colour)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def png(self) -> bytes:
        return encode_png(self.width, self.height, self.pixels)


def line_chart(
    series: Sequence[Sequence[float | None]], width: int = 800, height: int = 300, margin: int = 20
) -> bytes:
    """PNG of ``series`` (values 0..1, None = gap) over a shared x axis, one colour each."""
    c = Canvas(width, height)
    left, right, top, bottom = margin, width - margin, margin, height - margin
    for k in range(5):  # grid at 0, 25, 50, 75, 100 %
        y = bottom - round(k / 4 * (bottom - top))
        c.line(left, y, right, y, _GRID)
    c.line(left, top, left, bottom, _FRAME)
    c.line(left, bottom, right, bottom, _FRAME)
    for n, values in enumerate(series):
        colour = PALETTE[n % len(PALETTE)]
        count = len(values)
        prev: tuple[int, int] | None = None
        for i, v in enumerate(values):
            if v is None:
                prev = None
                continue
            x = left + (round(i / (count - 1) * (right - left)) if count > 1 else 0)
            y = bottom - round(max(0.0, min(1.0, v)) * (bottom - top))
            if prev is not None:
                c.line(prev[0], prev[1], x, y, colour, thick=2)
            else:
                c.dot(x, y, colour)
            prev = (x, y)
    return c.png()


def write_chart(path: Path, series: Sequence[Sequence[float | None]], **kw: int) -> None:
    Path(path).write_bytes(line_chart(series, **kw))
