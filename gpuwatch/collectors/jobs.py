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

Each cycle costs one ``scandir`` per directory level and one ``pread`` per counter file:
a job's counter files (``cpu.stat``, ``memory.current``, ``memory.swap.current``,
``memory.pressure``; v1 ``cpuacct.usage``, ``memory.usage_in_bytes``,
``memory.memsw.usage_in_bytes``) stay open from the job's first sighting
(:mod:`gpuwatch.collectors.keptfiles`). Its limit files (``memory.max``,
``cpuset.cpus.effective``; v1 ``memory.limit_in_bytes``, ``cpuset.cpus``) are not read every
cycle but at the first sighting and then every :data:`LIMITS_REFRESH_S`: Slurm writes them
when it creates the job's cgroup, yet the kernel does not make them constant (cgroup-v2.rst:
``memory.max`` is read-write; ``cpuset.cpus.effective`` follows CPU hotplug and the parent's
cpuset), so a changed limit shows within a refresh period. A file absent at the first
sighting (no swap accounting, no PSI) is tried again at each refresh.

A job directory's inode number identifies its cgroup, so a job id whose directory was
recreated (a requeued job) has its files opened anew. A read on a kept fd of a removed
cgroup fails with ENODEV: that job is left out of the cycle and its fds are closed, and if
its directory is still listed next cycle it is opened again as a new sighting.

``cpu_used_cores`` is the CPU-time delta over the collector's monotonic clock between two
calls, so a job's first sighting has ``null`` there while its memory fields are sent.

Slurm 26.05+ may name job directories by SLUID instead of ``job_<numeric id>``. Their format
is not assumed here: a directory in a job position that is not ``job_<digits>`` (and not
Slurm's own ``system`` cgroup) is skipped with a debug log, once per name, until the mapping
from SLUID to job id is known (it needs Slurm, not the cgroup tree).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

from gpuwatch.collectors.base import Collector, parse_uint, register
from gpuwatch.collectors.keptfiles import GONE, FdBudget, KeptFile, read_once
from gpuwatch.config import HostPaths, Settings
from gpuwatch.wire import JobSample

log = logging.getLogger(__name__)

T = TypeVar("T")

#: memory.limit_in_bytes at or above this is the kernel's "no limit" (PAGE_COUNTER_MAX * page)
V1_UNLIMITED_FROM = 2**62
#: Slurm's own slurmstepd cgroup next to the job dirs, not a job
_SLURM_SYSTEM_DIR = "system"
#: seconds between re-reads of a job's limit files (memory limit, cpuset): see the module doc
LIMITS_REFRESH_S = 60.0


# ---------------------------------------------------------------- pure parsers


def parse_cpu_stat_usage_ns(text: str) -> int:
    """``cpu.stat`` (v2) ``usage_usec`` line, returned in nanoseconds like v1's ``cpuacct.usage``."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] == "usage_usec":
            return parse_uint(fields[1]) * 1000
    raise ValueError("no usage_usec line")


def parse_memory_max(text: str) -> int | None:
    """``memory.max`` (v2): bytes, or ``max`` meaning no limit (None)."""
    if text.strip() == "max":
        return None
    return parse_uint(text)


def parse_v1_limit(text: str) -> int | None:
    """``memory.limit_in_bytes`` (v1): bytes, None for the kernel's "unlimited" value."""
    value = parse_uint(text)
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


def parse_file(path: str, data: bytes, parse: Callable[[str], T]) -> T:
    """``parse`` applied to a file's bytes; an error names the file, so the recorded error says which."""
    try:
        return parse(data.decode())
    except ValueError as exc:  # UnicodeDecodeError included
        raise ValueError(f"{path}: {exc}") from exc


# ---------------------------------------------------------------- what is read per job


@dataclass(frozen=True)
class CgroupFile:
    """One file read per job: the field it fills, its name and parser, and (v1) its hierarchy."""

    field: str
    name: str
    parse: Callable[[str], Any]
    #: v1 controller hierarchy under the cgroup root holding the file; "" in v2's one tree
    controller: str = ""


#: v1 memory + swap, turned into ``memory_swap_bytes`` by subtracting memory alone
_MEMSW = "memsw_bytes"

V2_COUNTERS = (
    CgroupFile("cpu_usage_ns", "cpu.stat", parse_cpu_stat_usage_ns),
    CgroupFile("memory_used_bytes", "memory.current", parse_uint),
    CgroupFile("memory_swap_bytes", "memory.swap.current", parse_uint),
    CgroupFile("memory_pressure_ratio", "memory.pressure", parse_pressure_some_avg10),
)
V2_LIMITS = (
    CgroupFile("memory_limit_bytes", "memory.max", parse_memory_max),
    CgroupFile("cpu_allocated_cores", "cpuset.cpus.effective", parse_cpu_list),
)
V1_CONTROLLERS = ("cpuacct", "memory", "cpuset")
V1_COUNTERS = (
    CgroupFile("cpu_usage_ns", "cpuacct.usage", parse_uint, "cpuacct"),
    CgroupFile("memory_used_bytes", "memory.usage_in_bytes", parse_uint, "memory"),
    CgroupFile(_MEMSW, "memory.memsw.usage_in_bytes", parse_uint, "memory"),
)
V1_LIMITS = (
    CgroupFile("memory_limit_bytes", "memory.limit_in_bytes", parse_v1_limit, "memory"),
    CgroupFile("cpu_allocated_cores", "cpuset.cpus", parse_cpu_list, "cpuset"),
)


class JobCgroup:
    """One job's cgroup files: counters on kept fds, limits cached until ``refresh_at``.

    ``dirs`` maps each controller the job is in ("" in v2) to its directory; a file of a
    controller the job is not in is not read (its field stays null). ``identity`` is the
    directories' inode numbers: the same job id with a new cgroup (requeued) is a new one.
    """

    def __init__(
        self,
        job_id: str,
        version: Literal[1, 2],
        dirs: dict[str, os.DirEntry[str]],
        budget: FdBudget,
    ) -> None:
        counters, limits = (V2_COUNTERS, V2_LIMITS) if version == 2 else (V1_COUNTERS, V1_LIMITS)
        self.job_id = job_id
        self.version = version
        self.identity = dir_identity(dirs)
        self._dirs = [entry.path for entry in dirs.values()]
        self._counters = [
            (spec, KeptFile(f"{dirs[spec.controller].path}/{spec.name}", budget))
            for spec in counters
            if spec.controller in dirs
        ]
        self._limit_files = [
            (spec, f"{dirs[spec.controller].path}/{spec.name}") for spec in limits if spec.controller in dirs
        ]
        self.limits: dict[str, Any] = {}
        self.refresh_at = -math.inf

    def refresh(self, mono: float, period_s: float) -> bool:
        """Open what is not open yet and re-read the limits; False if the cgroup is gone."""
        for _, kept in self._counters:
            kept.open()
        limits: dict[str, Any] = {}
        missing = any(kept.absent for _, kept in self._counters)
        for spec, path in self._limit_files:
            data = read_once(path)
            missing = missing or data is None
            limits[spec.field] = None if data is None else parse_file(path, data, spec.parse)
        if missing and not all(os.path.isdir(d) for d in self._dirs):
            return False  # not an absent optional file: the job ended while being opened
        self.limits = limits
        self.refresh_at = mono + period_s
        return True

    def read(self) -> dict[str, Any] | None:
        """This cycle's values by field, cached limits included; None if the cgroup is gone."""
        values = dict(self.limits)
        try:
            for spec, kept in self._counters:
                data = kept.read()
                values[spec.field] = None if data is None else parse_file(kept.path, data, spec.parse)
        except OSError as exc:
            if exc.errno in GONE:
                return None
            raise
        return values

    def close(self) -> None:
        """Close every kept fd (idempotent)."""
        for _, kept in self._counters:
            kept.close()


def dir_identity(dirs: dict[str, os.DirEntry[str]] | None) -> tuple[tuple[str, int], ...]:
    """A job's cgroup directories as (controller, inode) pairs; a new cgroup has new inodes."""
    if not dirs:
        return ()
    return tuple(sorted((controller, entry.inode()) for controller, entry in dirs.items()))


def _subdirs(path: str, prefix: str = "", suffix: str = "") -> list[os.DirEntry[str]]:
    """Sub-directories of ``path`` named ``prefix...suffix``; none if ``path`` is not a directory.

    The name filter comes before ``is_dir()``: a cgroup directory holds dozens of interface
    files, and ``scandir`` gives names and types without a stat per entry.
    """
    try:
        with os.scandir(path) as entries:
            return [
                e for e in entries if e.name.startswith(prefix) and e.name.endswith(suffix) and e.is_dir()
            ]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _swap_from_memsw(values: dict[str, Any]) -> None:
    """v1: ``memory.memsw.usage_in_bytes`` is memory + swap; the swap part replaces it."""
    memsw = values.pop(_MEMSW, None)
    used = values.get("memory_used_bytes")
    if memsw is not None and used is not None:
        values["memory_swap_bytes"] = max(0, memsw - used)


class JobsCollector(Collector):
    """Emits one :class:`JobSample` per Slurm job with a cgroup on this node.

    Every cycle lists the job directories (one ``scandir`` per level) and re-reads each
    job's counter files on kept fds; limits are re-read every ``limits_refresh_s`` per job.
    ``max_kept_fds`` caps the fds kept open (default: half the soft ``RLIMIT_NOFILE``).
    """

    name = "jobs"

    def __init__(
        self,
        paths: HostPaths,
        clock: Callable[[], float] = time.monotonic,
        limits_refresh_s: float = LIMITS_REFRESH_S,
        max_kept_fds: int | None = None,
    ) -> None:
        self._root = str(paths.cgroup)
        self._clock = clock
        self._limits_refresh_s = limits_refresh_s
        self._budget = FdBudget(max_kept_fds)
        self._jobs: dict[str, JobCgroup] = {}
        self._prev: dict[str, tuple[float, int]] = {}
        self._skipped_logged: set[str] = set()

    # --- discovery

    def _job_dir_id(self, entry: os.DirEntry[str]) -> str | None:
        job_id = job_id_from_dir(entry.name)
        if job_id is None and entry.name != _SLURM_SYSTEM_DIR and entry.name not in self._skipped_logged:
            self._skipped_logged.add(entry.name)
            log.debug(
                "skipping %s: not job_<numeric id> (SLUID-named job dirs are not mapped yet)", entry.path
            )
        return job_id

    def _v2_job_dirs(self) -> dict[str, dict[str, os.DirEntry[str]]]:
        found: dict[str, dict[str, os.DirEntry[str]]] = {}
        for scope in _subdirs(f"{self._root}/system.slice", suffix="slurmstepd.scope"):
            for entry in _subdirs(scope.path):
                job_id = self._job_dir_id(entry)
                if job_id is not None:
                    found[job_id] = {"": entry}
        return found

    def _v1_job_dirs(self) -> dict[str, dict[str, os.DirEntry[str]]]:
        found: dict[str, dict[str, os.DirEntry[str]]] = {}
        for controller in V1_CONTROLLERS:
            for slurm_dir in _subdirs(f"{self._root}/{controller}", "slurm"):
                if slurm_dir.name != "slurm" and not slurm_dir.name.startswith("slurm_"):
                    continue
                for uid_dir in _subdirs(slurm_dir.path, "uid_"):
                    for entry in _subdirs(uid_dir.path):  # all: non-job_ names are logged (SLUID)
                        job_id = self._job_dir_id(entry)
                        if job_id is not None:
                            found.setdefault(job_id, {})[controller] = entry
        return found

    # --- keeping files open

    def _sync(self, found: dict[str, dict[str, os.DirEntry[str]]], version: Literal[1, 2]) -> None:
        """Forget the jobs whose cgroup is gone or replaced; start tracking the new ones."""
        for job_id, job in list(self._jobs.items()):
            if job.version != version or job.identity != dir_identity(found.get(job_id)):
                self._drop(job_id)
        for job_id, dirs in found.items():
            if job_id not in self._jobs:
                self._jobs[job_id] = JobCgroup(job_id, version, dirs, self._budget)

    def _drop(self, job_id: str) -> None:
        self._jobs.pop(job_id).close()

    def _read(self, job: JobCgroup, mono: float) -> dict[str, Any] | None:
        """One job's values this cycle, refreshing its limits when due; None once it is gone."""
        if mono >= job.refresh_at and not job.refresh(mono, self._limits_refresh_s):
            self._drop(job.job_id)
            return None
        values = job.read()
        if values is None:
            self._drop(job.job_id)
        return values

    # --- samples

    def collect(self, now: datetime) -> Sequence[JobSample]:
        if not os.path.isdir(self._root):
            self.close()
            return []
        version: Literal[1, 2] = 2 if os.path.exists(f"{self._root}/cgroup.controllers") else 1
        self._sync(self._v2_job_dirs() if version == 2 else self._v1_job_dirs(), version)
        mono = self._clock()
        samples = []
        current: dict[str, tuple[float, int]] = {}
        for job_id in sorted(self._jobs, key=lambda j: (len(j), j)):
            job = self._jobs[job_id]
            values = self._read(job, mono)
            if values is None:
                continue
            if version == 1:
                _swap_from_memsw(values)
                if all(v is None for v in values.values()):
                    continue
            samples.append(self._sample(job, values, now, mono, current))
        self._prev = current  # ended jobs drop out here
        return samples

    def _sample(
        self,
        job: JobCgroup,
        values: dict[str, Any],
        now: datetime,
        mono: float,
        current: dict[str, tuple[float, int]],
    ) -> JobSample:
        """The job's sample, its CPU rate against the previous cycle's usage (noted in ``current``)."""
        usage_ns = values.pop("cpu_usage_ns", None)
        used_cores = None
        if usage_ns is not None:
            current[job.job_id] = (mono, usage_ns)
            before = self._prev.get(job.job_id)
            if before is not None:
                used_cores = cpu_used_cores(before[1], usage_ns, mono - before[0])
        return JobSample(
            ts=now, job_id=job.job_id, cpu_used_cores=used_cores, cgroup_version=job.version, **values
        )

    def close(self) -> None:
        """Close every kept fd; a later :meth:`collect` opens what it needs again."""
        for job_id in list(self._jobs):
            self._drop(job_id)


@register("jobs")
def make_jobs(settings: Settings) -> Collector | None:
    """The jobs collector, or None where there is no cgroup mount at all."""
    paths = settings.host_paths
    if not paths.cgroup.is_dir():
        return None
    return JobsCollector(paths)
