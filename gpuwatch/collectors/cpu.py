"""Host CPU time split over the interval, from ``/proc/stat``, and load from ``/proc/loadavg``.

``/proc/stat`` ``cpu``/``cpuN`` lines are cumulative jiffies since boot, in the order
``user nice system idle iowait irq softirq steal guest guest_nice`` (proc(5)). The kernel
already adds ``guest`` to ``user`` and ``guest_nice`` to ``nice``, so the total is the sum of
the first eight columns only; adding the guest columns would count guest time twice.

Ratios come from the deltas between two snapshots, so the first call returns nothing. Per
CPU ``iowait`` is known to go backwards on some kernels (proc(5): "the iowait field may
decrease"), so each column's delta is clamped at zero and the total is the sum of the
clamped deltas: every ratio then stays inside 0..1.

What each ratio sums (all over the same total):

- ``user_ratio``: user + nice
- ``system_ratio``: system + irq + softirq
- ``iowait_ratio``: iowait; ``steal_ratio``: steal
- ``busy_ratio``: everything but idle and iowait, i.e. user + system + steal ratios.

``threads_per_core`` comes from ``/sys/devices/system/cpu/cpuN/topology/thread_siblings_list``
(the logical CPUs sharing cpuN's core: ``0,64`` or ``0-1`` with SMT on, ``0`` without): a
job's CPU use is then judged against its physical cores, so eight processes busy on sixteen
SMT threads read as a full allocation, not half of one. Read again whenever the set of
online CPUs changes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuwatch.collectors.base import Collector, read_optional, read_parsed, register_proc_file
from gpuwatch.config import HostPaths
from gpuwatch.wire import CpuSample

log = logging.getLogger(__name__)

#: the columns of a ``cpu`` line that make up its total (guest/guest_nice are inside user/nice)
_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
#: ``cpu`` lines of kernels before 2.6.11 stop after softirq; steal is then 0
_MIN_COLUMNS = 7


@dataclass(frozen=True)
class CpuTimes:
    """One ``cpu`` line of ``/proc/stat``: cumulative jiffies per state (guest excluded)."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int = 0


@dataclass(frozen=True)
class ProcStat:
    """The ``cpu`` lines of one ``/proc/stat`` snapshot."""

    total: CpuTimes
    per_core: dict[int, CpuTimes]


@dataclass(frozen=True)
class CpuRatios:
    """Share of the interval per state for one CPU or all of them."""

    busy: float
    user: float
    system: float
    iowait: float
    steal: float


def _parse_cpu_line(fields: list[str]) -> CpuTimes:
    values = fields[1:]
    if len(values) < _MIN_COLUMNS:
        raise ValueError(f"{fields[0]} line has {len(values)} columns, expected at least {_MIN_COLUMNS}")
    try:
        numbers = [int(v) for v in values[: len(_COLUMNS)]]
    except ValueError:
        raise ValueError(f"{fields[0]} line has a non-integer column: {' '.join(fields)!r}") from None
    return CpuTimes(*numbers)


def parse_proc_stat(text: str) -> ProcStat:
    """Parse the ``cpu`` (all CPUs) and ``cpuN`` lines of ``/proc/stat``; other lines are ignored."""
    total: CpuTimes | None = None
    per_core: dict[int, CpuTimes] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("cpu"):
            continue
        name = fields[0]
        if name == "cpu":
            total = _parse_cpu_line(fields)
        elif name[3:].isdigit():
            per_core[int(name[3:])] = _parse_cpu_line(fields)
        else:
            raise ValueError(f"unexpected line name {name!r}")
    if total is None:
        raise ValueError("no aggregate 'cpu' line")
    return ProcStat(total=total, per_core=per_core)


def parse_loadavg(text: str) -> float:
    """The 1-minute load average: the first field of ``/proc/loadavg``."""
    fields = text.split()
    if not fields:
        raise ValueError("empty /proc/loadavg")
    try:
        return float(fields[0])
    except ValueError:
        raise ValueError(f"load1 is not a number: {fields[0]!r}") from None


def parse_cpu_list(text: str) -> list[int]:
    """A kernel CPU list (``0-3,8,10-11``) as the CPUs it names, in order."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, sep, last = part.partition("-")
        try:
            low, high = int(first), int(last) if sep else int(first)
        except ValueError:
            raise ValueError(f"not a CPU list: {text.strip()!r}") from None
        if high < low:
            raise ValueError(f"not a CPU list: {text.strip()!r}")
        cpus.extend(range(low, high + 1))
    return cpus


def threads_per_core(sibling_lists: Sequence[str]) -> int | None:
    """The most logical CPUs any core has, from each CPU's ``thread_siblings_list``."""
    counts = [len(parse_cpu_list(text)) for text in sibling_lists]
    return max(counts) if counts and max(counts) > 0 else None


def cpu_ratios(t0: CpuTimes, t1: CpuTimes) -> CpuRatios | None:
    """Ratios of each state over the interval between two snapshots; None if no time passed."""
    d = {col: max(0, getattr(t1, col) - getattr(t0, col)) for col in _COLUMNS}
    total = sum(d.values())
    if total == 0:
        return None
    user = d["user"] + d["nice"]
    system = d["system"] + d["irq"] + d["softirq"]
    return CpuRatios(
        busy=(user + system + d["steal"]) / total,
        user=user / total,
        system=system / total,
        iowait=d["iowait"] / total,
        steal=d["steal"] / total,
    )


def per_core_busy(t0: ProcStat, t1: ProcStat) -> list[float] | None:
    """Busy ratio per CPU in index order; None when CPUs went on/offline between snapshots."""
    if t0.per_core.keys() != t1.per_core.keys() or not t1.per_core:
        return None
    busy: list[float] = []
    for index in sorted(t1.per_core):
        ratios = cpu_ratios(t0.per_core[index], t1.per_core[index])
        if ratios is None:  # an offline-then-online CPU with no ticks: busy is unknown
            return None
        busy.append(ratios.busy)
    return busy


class CpuCollector(Collector):
    """Emits one :class:`CpuSample` per call from the second call on.

    No clock is needed: the jiffies in ``/proc/stat`` are their own time base.
    """

    name = "cpu"

    def __init__(self, paths: HostPaths) -> None:
        self._stat_path = paths.proc / "stat"
        self._loadavg_path = paths.proc / "loadavg"
        self._cpu_dir = paths.sys / "devices" / "system" / "cpu"
        self._prev: ProcStat | None = None
        self._topology_of: frozenset[int] | None = None  # the online CPUs the count was read for
        self._threads_per_core: int | None = None

    def collect(self, now: datetime) -> Sequence[CpuSample]:
        snap = read_parsed(self._stat_path, parse_proc_stat)
        load1 = self._read_load1()
        online = frozenset(snap.per_core)
        if online != self._topology_of:
            self._threads_per_core, self._topology_of = self._read_threads_per_core(online), online
        prev, self._prev = self._prev, snap
        if prev is None:
            return []
        ratios = cpu_ratios(prev.total, snap.total)
        if ratios is None:
            log.debug("no CPU time passed between two reads of %s", self._stat_path)
            return []
        return [
            CpuSample(
                ts=now,
                cores=len(snap.per_core),
                busy_ratio=ratios.busy,
                user_ratio=ratios.user,
                system_ratio=ratios.system,
                iowait_ratio=ratios.iowait,
                steal_ratio=ratios.steal,
                per_core_busy_ratio=per_core_busy(prev, snap),
                load1=load1,
                threads_per_core=self._threads_per_core,
            )
        ]

    def _read_threads_per_core(self, online: frozenset[int]) -> int | None:
        """None where sysfs has no topology (containers without /sys, old kernels)."""
        lists = []
        for cpu in sorted(online):
            path = self._cpu_dir / f"cpu{cpu}" / "topology" / "thread_siblings_list"
            text = read_optional(path, str)
            if text is not None:
                lists.append(text)
        try:
            return threads_per_core(lists)
        except ValueError as exc:
            log.warning("CPU topology unreadable: %s", exc)
            return None

    def _read_load1(self) -> float | None:
        return read_optional(self._loadavg_path, parse_loadavg)


make_cpu = register_proc_file("cpu", "stat", CpuCollector)
