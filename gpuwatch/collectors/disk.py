"""Block device throughput and busy time from ``/proc/diskstats``.

Each line is ``major minor name`` then cumulative counters (Documentation/admin-guide/
iostats.rst); by 1-based field number of the whole line:

- 4 reads completed, 6 sectors read, 8 writes completed, 10 sectors written;
- 13 ``io_ticks``: milliseconds the device had I/O in flight, so its delta over the
  interval is the busy ratio (``%util`` of ``iostat -x``).

Sectors are always 512 bytes here, whatever the device's logical block size (the kernel
counts in 512-byte units). Only whole disks are reported: a name is a whole disk if
``/sys/block/<name>`` exists (partitions live under their disk's directory instead), and
loop/ram/zram/floppy devices are skipped by name prefix. Device-mapper and md devices are
whole disks in ``/sys/block`` and are kept, so stacked devices count their I/O at each layer.

Rates need two snapshots, so the first call returns nothing; a device whose counters went
backwards (re-attached, stats reset) is left out for that cycle. ``io_ticks`` can run a few
ms past the wall-clock interval (it is sampled at I/O completion), so the ratio is capped at 1.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from gpuwatch.collectors.base import Collector, counter_deltas, read_parsed, register_proc_file
from gpuwatch.config import HostPaths
from gpuwatch.wire import DiskSample

log = logging.getLogger(__name__)

SECTOR_BYTES = 512
DEFAULT_EXCLUDE_PREFIXES = ("loop", "ram", "zram", "fd")
#: kernels before 4.18 have 14 fields per line; newer add discard (18) and flush (20) fields
_MIN_FIELDS = 14


@dataclass(frozen=True)
class DiskCounters:
    """The cumulative ``/proc/diskstats`` counters of one device that the sample uses."""

    reads: int
    sectors_read: int
    writes: int
    sectors_written: int
    io_ticks_ms: int


def parse_diskstats(text: str) -> dict[str, DiskCounters]:
    """Parse ``/proc/diskstats`` into device name -> counters (every device, no filtering)."""
    devices: dict[str, DiskCounters] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) < _MIN_FIELDS:
            raise ValueError(
                f"line has {len(parts)} fields, expected at least {_MIN_FIELDS}: {line.strip()!r}"
            )
        name = parts[2]
        try:
            devices[name] = DiskCounters(
                reads=int(parts[3]),
                sectors_read=int(parts[5]),
                writes=int(parts[7]),
                sectors_written=int(parts[9]),
                io_ticks_ms=int(parts[12]),
            )
        except ValueError:
            raise ValueError(f"{name}: non-integer counter in {line.strip()!r}") from None
    return devices


def is_whole_disk(
    name: str, sys_block: Path, exclude_prefixes: Iterable[str] = DEFAULT_EXCLUDE_PREFIXES
) -> bool:
    """True for a device listed in ``/sys/block`` whose name has no excluded prefix.

    sysfs spells a ``/`` in a disk name (``cciss/c0d0``) as ``!``.
    """
    if name.startswith(tuple(exclude_prefixes)):
        return False
    return (sys_block / name.replace("/", "!")).exists()


def disk_sample(
    name: str, prev: DiskCounters, cur: DiskCounters, elapsed_s: float, now: datetime
) -> DiskSample | None:
    """Rates and busy ratio of one device; None if a counter went backwards or no time passed."""
    if elapsed_s <= 0:
        return None
    d = counter_deltas(prev, cur)
    if d is None:
        log.debug("%s: a /proc/diskstats counter went backwards (reset); no rate this cycle", name)
        return None
    return DiskSample(
        ts=now,
        device=name,
        read_bytes_per_s=d.sectors_read * SECTOR_BYTES / elapsed_s,
        write_bytes_per_s=d.sectors_written * SECTOR_BYTES / elapsed_s,
        reads_per_s=d.reads / elapsed_s,
        writes_per_s=d.writes / elapsed_s,
        busy_ratio=min(1.0, d.io_ticks_ms / 1000 / elapsed_s),
    )


class DiskCollector(Collector):
    """Emits one :class:`DiskSample` per whole disk from the second call on."""

    name = "disk"

    def __init__(
        self,
        paths: HostPaths,
        clock: Callable[[], float] = time.monotonic,
        exclude_prefixes: Iterable[str] = DEFAULT_EXCLUDE_PREFIXES,
    ) -> None:
        self._path = paths.proc / "diskstats"
        self._sys_block = paths.sys / "block"
        self._clock = clock
        self._exclude = tuple(exclude_prefixes)
        self._prev: tuple[float, dict[str, DiskCounters]] | None = None

    def collect(self, now: datetime) -> Sequence[DiskSample]:
        parsed = read_parsed(self._path, parse_diskstats)
        mono = self._clock()
        cur = {name: c for name, c in parsed.items() if is_whole_disk(name, self._sys_block, self._exclude)}
        prev, self._prev = self._prev, (mono, cur)
        if prev is None:
            return []
        samples = []
        for name in sorted(cur):
            if name in prev[1]:
                sample = disk_sample(name, prev[1][name], cur[name], mono - prev[0], now)
                if sample is not None:
                    samples.append(sample)
        return samples


make_disk = register_proc_file("disk", "diskstats", DiskCollector)
