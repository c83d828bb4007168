"""Host memory from ``/proc/meminfo`` and swap traffic from ``/proc/vmstat``.

``/proc/meminfo`` values are in kB (really KiB, proc(5)) and converted to bytes.
``MemAvailable`` (kernel 3.14+) is the kernel's own estimate of what can be allocated
without swapping; ``used = MemTotal - MemAvailable`` is what a job can no longer get, which
is what "memory at the limit" needs (``MemFree`` would count page cache as used).

``/proc/vmstat`` ``pswpin``/``pswpout`` are cumulative pages swapped in/out since boot; times
the page size (``os.sysconf('SC_PAGE_SIZE')``) over the interval they give bytes/s. The first
call, or a counter that went backwards, gives ``null`` rates while the levels are still sent.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuwatch.collectors.base import Collector, read_optional, read_parsed, register_proc_file
from gpuwatch.config import HostPaths
from gpuwatch.wire import MemorySample

log = logging.getLogger(__name__)

_KIB = 1024


@dataclass(frozen=True)
class MemInfo:
    """The ``/proc/meminfo`` fields the sample needs, in bytes."""

    total_bytes: int
    available_bytes: int
    swap_total_bytes: int
    swap_free_bytes: int


@dataclass(frozen=True)
class SwapCounters:
    """``/proc/vmstat`` cumulative swap pages; None where the kernel lacks the line."""

    pswpin: int | None
    pswpout: int | None


def parse_meminfo(text: str) -> MemInfo:
    """Parse ``/proc/meminfo`` (``Key:  value kB`` lines) into bytes.

    ``MemTotal`` and ``MemAvailable`` are required; a kernel without swap lacks nothing, but
    ``SwapTotal``/``SwapFree`` default to 0 if absent.
    """
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        parts = rest.split()
        if not parts:
            raise ValueError(f"{key}: no value")
        try:
            number = int(parts[0])
        except ValueError:
            raise ValueError(f"{key}: not an integer: {parts[0]!r}") from None
        unit = parts[1] if len(parts) > 1 else ""
        values[key.strip()] = number * _KIB if unit == "kB" else number
    for key in ("MemTotal", "MemAvailable"):
        if key not in values:
            raise ValueError(f"no {key} line (MemAvailable needs kernel 3.14+)")
    return MemInfo(
        total_bytes=values["MemTotal"],
        available_bytes=values["MemAvailable"],
        swap_total_bytes=values.get("SwapTotal", 0),
        swap_free_bytes=values.get("SwapFree", 0),
    )


def parse_vmstat_swap(text: str) -> SwapCounters:
    """Pick ``pswpin`` and ``pswpout`` (pages) out of ``/proc/vmstat`` (``name value`` lines)."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] in ("pswpin", "pswpout"):
            try:
                found[fields[0]] = int(fields[1])
            except ValueError:
                raise ValueError(f"{fields[0]}: not an integer: {fields[1]!r}") from None
    return SwapCounters(pswpin=found.get("pswpin"), pswpout=found.get("pswpout"))


def page_rate(prev: int | None, cur: int | None, page_size: int, elapsed_s: float) -> float | None:
    """Bytes/s from two page counters; None if either is missing or the counter went back."""
    if prev is None or cur is None or cur < prev or elapsed_s <= 0:
        return None
    return (cur - prev) * page_size / elapsed_s


class MemoryCollector(Collector):
    """Emits one :class:`MemorySample` per call; swap rates from the second call on."""

    name = "memory"

    def __init__(
        self,
        paths: HostPaths,
        clock: Callable[[], float] = time.monotonic,
        page_size: int | None = None,
    ) -> None:
        self._meminfo_path = paths.proc / "meminfo"
        self._vmstat_path = paths.proc / "vmstat"
        self._clock = clock
        self._page_size = page_size if page_size is not None else os.sysconf("SC_PAGE_SIZE")
        self._prev: tuple[float, SwapCounters] | None = None

    def collect(self, now: datetime) -> Sequence[MemorySample]:
        info = read_parsed(self._meminfo_path, parse_meminfo)
        swap = self._read_swap()
        mono = self._clock()
        swap_in = swap_out = None
        if self._prev is not None:
            prev_mono, prev_swap = self._prev
            elapsed = mono - prev_mono
            swap_in = page_rate(prev_swap.pswpin, swap.pswpin, self._page_size, elapsed)
            swap_out = page_rate(prev_swap.pswpout, swap.pswpout, self._page_size, elapsed)
        self._prev = (mono, swap)
        return [
            MemorySample(
                ts=now,
                total_bytes=info.total_bytes,
                available_bytes=info.available_bytes,
                # MemAvailable can exceed MemTotal for a moment on some kernels; never negative
                used_bytes=max(0, info.total_bytes - info.available_bytes),
                swap_total_bytes=info.swap_total_bytes,
                swap_used_bytes=max(0, info.swap_total_bytes - info.swap_free_bytes),
                swap_in_bytes_per_s=swap_in,
                swap_out_bytes_per_s=swap_out,
            )
        ]

    def _read_swap(self) -> SwapCounters:
        swap = read_optional(self._vmstat_path, parse_vmstat_swap)
        return SwapCounters(None, None) if swap is None else swap


make_memory = register_proc_file("memory", "meminfo", MemoryCollector)
