"""Per-Slurm-job CPU and memory on this node, read from the jobs' cgroups.

Slurm's task/cgroup and jobacct_gather/cgroup plugins give every job a cgroup; reading it
needs no Slurm API and sees exactly what the job was granted and uses. Which layout is
in use is decided per call by ``<cgroup>/cgroup.controllers``: present means the unified
(v2) hierarchy, absent means v1 (or hybrid, where Slurm's cgroup/v1 plugin is used).

cgroup v2 (Slurm ``cgroup/v2``), job dirs ``<cgroup>/system.slice/slurmstepd.scope/job_<id>/``
(``<nodename>_slurmstepd.scope`` with multiple slurmd per host):

- ``cpu.stat`` ``usage_usec``: CPU time of all the job's tasks, microseconds;
- ``memory.current`` bytes; ``memory.max`` bytes or ``max`` (no limit -> null);
- ``memory.swap.current`` bytes (absent without swap accounting -> null);
- ``memory.pressure`` ``some avg10`` percent -> ratio (absent without PSI -> null);
- ``cpuset.cpus.effective``, a CPU list like ``0-3,8`` -> count of CPUs.

cgroup v1 (Slurm ``cgroup/v1``), one tree per controller,
``<cgroup>/<controller>/slurm/uid_<uid>/job_<id>/`` (``slurm_<nodename>/`` instead of
``slurm/`` with multiple slurmd per host; both are searched):

- ``cpuacct/.../cpuacct.usage``: CPU time, nanoseconds;
- ``memory/.../memory.usage_in_bytes``, ``memory.limit_in_bytes`` (the kernel's "unlimited"
  is ``PAGE_COUNTER_MAX * page size``, about 2**63, so anything from 2**62 up -> null) and
  ``memory.memsw.usage_in_bytes`` (memory + swap, only with swap accounting) for swap;
- ``cpuset/.../cpuset.cpus``: CPU list.

Memory usage in both versions includes the job's page cache, as Slurm's own accounting does.

``cpu_used_cores`` is the CPU-time delta over the collector's monotonic clock between two
calls, so a job's first sighting has ``null`` there while its memory fields are sent.

Slurm 26.05+ may name job directories by SLUID instead of ``job_<numeric id>``. Their format
is not assumed here: a directory in a job position that is not ``job_<digits>`` (and not
Slurm's own ``system`` cgroup) is skipped with a debug log, once per name, until the mapping
from SLUID to job id is known (it needs Slurm, not the cgroup tree).
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from gpuwatch.collectors.base import Collector, read_optional, register
from gpuwatch.config import HostPaths, Settings
from gpuwatch.wire import JobSample

log = logging.getLogger(__name__)

T = TypeVar("T")

#: memory.limit_in_bytes at or above this is the kernel's "no limit" (PAGE_COUNTER_MAX * page)
V1_UNLIMITED_FROM = 2**62
#: Slurm's own slurmstepd cgroup next to the job dirs, not a job
_SLURM_SYSTEM_DIR = "system"


@dataclass(frozen=True)
class JobReading:
    """One job's cgroup files read at one time; None where the file is absent."""

    job_id: str
    cgroup_version: Literal[1, 2]
    cpu_usage_ns: int | None = None
    cpu_allocated_cores: int | None = None
    memory_used_bytes: int | None = None
    memory_limit_bytes: int | None = None
    memory_swap_bytes: int | None = None
    memory_pressure_ratio: float | None = None


# ---------------------------------------------------------------- pure parsers


def parse_int(text: str) -> int:
    """A cgroup file holding one non-negative integer (``memory.current``, ``cpuacct.usage``)."""
    value = text.strip()
    if not value.isdigit():
        raise ValueError(f"not a non-negative integer: {value!r}")
    return int(value)


def parse_cpu_stat_usage_ns(text: str) -> int:
    """``cpu.stat`` (v2) ``usage_usec`` line, returned in nanoseconds like v1's ``cpuacct.usage``."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] == "usage_usec":
            return parse_int(fields[1]) * 1000
    raise ValueError("no usage_usec line")


def parse_memory_max(text: str) -> int | None:
    """``memory.max`` (v2): bytes, or ``max`` meaning no limit (None)."""
    if text.strip() == "max":
        return None
    return parse_int(text)


def parse_v1_limit(text: str) -> int | None:
    """``memory.limit_in_bytes`` (v1): bytes, None for the kernel's "unlimited" value."""
    value = parse_int(text)
    return None if value >= V1_UNLIMITED_FROM else value


def parse_pressure_some_avg10(text: str) -> float:
    """``memory.pressure`` (v2, PSI): the ``some`` line's ``avg10`` percent as a 0..1 ratio."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "some":
            for field in fields[1:]:
                key, _, value = field.partition("=")
                if key == "avg10":
                    try:
                        percent = float(value)
                    except ValueError:
                        raise ValueError(f"avg10 is not a number: {value!r}") from None
                    return min(1.0, max(0.0, percent / 100))
            raise ValueError("'some' line has no avg10")
    raise ValueError("no 'some' line")


def parse_cpu_list(text: str) -> int | None:
    """Count the CPUs in a cpuset list like ``0-3,8`` (``cpuset.cpus[.effective]``); empty -> None."""
    value = text.strip()
    if not value:
        return None
    count = 0
    for part in value.split(","):
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"bad CPU list {value!r}")
        lo, hi = int(first), int(last) if dash else int(first)
        if hi < lo:
            raise ValueError(f"bad CPU range {part!r} in {value!r}")
        count += hi - lo + 1
    return count


def job_id_from_dir(name: str) -> str | None:
    """The numeric Slurm job id of a ``job_<id>`` directory name; None for anything else."""
    prefix, _, rest = name.partition("_")
    if prefix == "job" and rest.isdigit():
        return rest
    return None


def cpu_used_cores(prev_ns: int, cur_ns: int, elapsed_s: float) -> float | None:
    """CPU seconds per wall second between two readings; None if time or usage went back."""
    if elapsed_s <= 0 or cur_ns < prev_ns:
        return None
    return (cur_ns - prev_ns) / (elapsed_s * 1e9)


# ---------------------------------------------------------------- file access


#: a cgroup file of a job that just ended: gone (ENOENT) or its controller detached (ENODEV)
_GONE = (errno.ENOENT, errno.ENODEV)


def _parsed(path: Path, parse: Callable[[str], T]) -> T | None:
    """A cgroup file parsed, or None if it (or its job, just ended) is gone."""
    return read_optional(path, parse, _GONE)


def _subdirs(path: Path, prefix: str = "") -> list[Path]:
    """Sub-directories whose names start with ``prefix``, sorted.

    ``os.scandir`` and the name filter first: a v1 controller root holds dozens of files and
    unrelated cgroups, and stat()ing each of them every cycle was the collector's main cost.
    """
    try:
        with os.scandir(path) as entries:
            return sorted(Path(e.path) for e in entries if e.name.startswith(prefix) and e.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []


class JobsCollector(Collector):
    """Emits one :class:`JobSample` per Slurm job with a cgroup on this node."""

    name = "jobs"

    def __init__(self, paths: HostPaths, clock: Callable[[], float] = time.monotonic) -> None:
        self._root = paths.cgroup
        self._clock = clock
        self._prev: dict[str, tuple[float, int]] = {}
        self._skipped_logged: set[str] = set()

    # --- discovery

    def _job_dir_id(self, path: Path) -> str | None:
        job_id = job_id_from_dir(path.name)
        if job_id is None and path.name != _SLURM_SYSTEM_DIR and path.name not in self._skipped_logged:
            self._skipped_logged.add(path.name)
            log.debug("skipping %s: not job_<numeric id> (SLUID-named job dirs are not mapped yet)", path)
        return job_id

    def _v2_job_dirs(self) -> Iterator[tuple[str, Path]]:
        for scope in sorted((self._root / "system.slice").glob("*slurmstepd.scope")):
            for job_dir in _subdirs(scope):
                job_id = self._job_dir_id(job_dir)
                if job_id is not None:
                    yield job_id, job_dir

    def _v1_job_dirs(self, controller: str) -> Iterator[tuple[str, Path]]:
        for slurm_dir in _subdirs(self._root / controller, "slurm"):
            if slurm_dir.name != "slurm" and not slurm_dir.name.startswith("slurm_"):
                continue
            for uid_dir in _subdirs(slurm_dir, "uid_"):
                for job_dir in _subdirs(uid_dir):  # all: non-job_ names are logged (SLUID)
                    job_id = self._job_dir_id(job_dir)
                    if job_id is not None:
                        yield job_id, job_dir

    # --- reading

    def _read_v2(self) -> list[JobReading]:
        readings = []
        for job_id, d in self._v2_job_dirs():
            reading = JobReading(
                job_id=job_id,
                cgroup_version=2,
                cpu_usage_ns=_parsed(d / "cpu.stat", parse_cpu_stat_usage_ns),
                cpu_allocated_cores=_parsed(d / "cpuset.cpus.effective", parse_cpu_list),
                memory_used_bytes=_parsed(d / "memory.current", parse_int),
                memory_limit_bytes=_parsed(d / "memory.max", parse_memory_max),
                memory_swap_bytes=_parsed(d / "memory.swap.current", parse_int),
                memory_pressure_ratio=_parsed(d / "memory.pressure", parse_pressure_some_avg10),
            )
            if d.is_dir():  # else the job ended while being read
                readings.append(reading)
        return readings

    def _read_v1(self) -> list[JobReading]:
        fields: dict[str, dict[str, Any]] = {}
        for job_id, d in self._v1_job_dirs("cpuacct"):
            fields.setdefault(job_id, {})["cpu_usage_ns"] = _parsed(d / "cpuacct.usage", parse_int)
        for job_id, d in self._v1_job_dirs("memory"):
            f = fields.setdefault(job_id, {})
            used = _parsed(d / "memory.usage_in_bytes", parse_int)
            memsw = _parsed(d / "memory.memsw.usage_in_bytes", parse_int)
            f["memory_used_bytes"] = used
            f["memory_limit_bytes"] = _parsed(d / "memory.limit_in_bytes", parse_v1_limit)
            if memsw is not None and used is not None:
                f["memory_swap_bytes"] = max(0, memsw - used)
        for job_id, d in self._v1_job_dirs("cpuset"):
            fields.setdefault(job_id, {})["cpu_allocated_cores"] = _parsed(d / "cpuset.cpus", parse_cpu_list)
        return [
            JobReading(job_id=job_id, cgroup_version=1, **values)
            for job_id, values in sorted(fields.items())
            if any(v is not None for v in values.values())
        ]

    def collect(self, now: datetime) -> Sequence[JobSample]:
        if not self._root.is_dir():
            return []
        is_v2 = (self._root / "cgroup.controllers").exists()
        readings = self._read_v2() if is_v2 else self._read_v1()
        mono = self._clock()
        samples = []
        current: dict[str, tuple[float, int]] = {}
        for r in sorted(readings, key=lambda r: (len(r.job_id), r.job_id)):
            used_cores = None
            if r.cpu_usage_ns is not None:
                current[r.job_id] = (mono, r.cpu_usage_ns)
                before = self._prev.get(r.job_id)
                if before is not None:
                    used_cores = cpu_used_cores(before[1], r.cpu_usage_ns, mono - before[0])
            samples.append(
                JobSample(
                    ts=now,
                    job_id=r.job_id,
                    cpu_used_cores=used_cores,
                    cpu_allocated_cores=r.cpu_allocated_cores,
                    memory_used_bytes=r.memory_used_bytes,
                    memory_limit_bytes=r.memory_limit_bytes,
                    memory_swap_bytes=r.memory_swap_bytes,
                    memory_pressure_ratio=r.memory_pressure_ratio,
                    cgroup_version=r.cgroup_version,
                )
            )
        self._prev = current  # ended jobs drop out here
        return samples


@register("jobs")
def make_jobs(settings: Settings) -> Collector | None:
    """The jobs collector, or None where there is no cgroup mount at all."""
    paths = settings.host_paths
    if not paths.cgroup.is_dir():
        return None
    return JobsCollector(paths)
