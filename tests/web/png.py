"""A minimal PNG reader (stdlib zlib + struct) for screenshot checks: 8-bit RGB/RGBA only."""

from __future__ import annotations

import struct
import zlib
from collections import Counter


def read_png(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """(width, height, bytes per pixel, rows of raw pixel bytes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, [], 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif f == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev, strict=True))
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def colour_counts(data: bytes, region: tuple[int, int, int, int] | None = None) -> Counter:
    """How many pixels of each (r, g, b) in ``region`` (x0, y0, x1, y1) or the whole image."""
    width, height, bpp, rows = read_png(data)
    x0, y0, x1, y1 = region or (0, 0, width, height)
    counts: Counter = Counter()
    for row in rows[y0:y1]:
        for x in range(x0, min(x1, width)):
            counts[tuple(row[x * bpp : x * bpp + 3])] += 1
    return counts


def near(counts: Counter, rgb: tuple[int, int, int], tol: int = 12) -> int:
    return sum(n for c, n in counts.items() if all(abs(a - b) <= tol for a, b in zip(c, rgb, strict=True)))
