"""The ``attribution`` collector: which Slurm job holds each GPU of this node, and how we know.

One :class:`~gpuwatch.wire.AttributionSample` per (GPU, job), from the sources of
DESIGN.md "GPU → job attribution", most trusted first:

1. ``prolog`` — the Slurm prolog's map files (``HostPaths.gpu_map_dir``, written by
   ``deploy/slurm/prolog.sh``, read by :func:`gpuwatch.slurm.attribution.read_gpu_maps`).
   Every allocated GPU has one, so an idle allocation (a job holding a GPU it never uses) is
   reported too: its sample has ``pids=[]`` when the GPU's process list was read and held
   none of the job's processes, ``pids=None`` when no process list was available.
2. ``process`` — a compute process on the GPU whose ``/proc/<pid>/cgroup`` names a Slurm job
   (cgroup v1 and v2).
3. ``environ`` — else its ``/proc/<pid>/environ`` ``SLURM_JOB_ID`` (a process can change
   its own environment: least trusted).

Processes also fill ``pids`` of the prolog samples (the pids of that job on that GPU), and a
process of *another* job on a GPU that has a map file is reported as its own sample: a
shared GPU (GRES sharding, ``OverSubscribe``) gives one sample per job, never two for the
same (GPU, job). Processes with no Slurm job (a login shell's ``nvidia-smi``,
``nvidia-persistenced``) give nothing.

Where the GPU process pids come from: the GPU collector already lists them every cycle
(``GpuSample.processes``), and collectors run in registry order within one agent cycle
("attribution" comes after "gpu"). Listing them a second time would mean a second NVML
backend (handles, threads) or guessing from ``/proc/<pid>/fd`` links to ``/dev/nvidia<N>``
(wrong without device cgroups: NVML users hold every device open). So the GPU collector
publishes each cycle's samples on a small process-wide board, :data:`GPU_PROCESSES`
(:meth:`GpuProcessBoard.publish`), and this collector reads the board, accepting only a
snapshot from the current cycle (younger than half an agent interval); a stale or empty
board means "process lists unknown", and attribution then comes from the map files alone.
The board also carries each GPU's UUID, which places a map file at the right NVML index.

GPU index: the wire's ``gpu_index`` is the NVML index, as in ``GpuSample``. A map file is
named by Slurm's GRES index, which is the position in gres.conf ``File=`` (the
``/dev/nvidia<minor>`` order) and not always the NVML index; when the file (or its name)
carries a UUID that the GPU collector saw, the NVML index of that UUID is used, otherwise the
GRES index is taken as the NVML index (true under Slurm's default ordering, and the
assumption ``job_gpus`` makes on the daemon side).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

# imported first so "gpu" is registered (and so runs in each cycle) before "attribution",
# whatever imports this module first
from gpuwatch.collectors import gpu as _gpu  # noqa: F401
from gpuwatch.collectors.base import Collector, register
from gpuwatch.collectors.gpu_processes import GPU_PROCESSES, GpuProcessBoard, GpuSeen
from gpuwatch.config import HostPaths, Settings
from gpuwatch.slurm.attribution import GpuMapEntry, GpuMaps, job_id_of_pid, read_gpu_maps
from gpuwatch.wire import AttributionSample

log = logging.getLogger(__name__)


@dataclass
class _Found:
    """One (GPU, job) while building a cycle's samples."""

    source: str
    entry: GpuMapEntry | None = None
    uuid: str | None = None
    pids: set[int] = field(default_factory=set)


_RANK = {"prolog": 0, "process": 1, "environ": 2}


def _uid_of(pid: int, proc: Path) -> int | None:
    """Real uid from ``/proc/<pid>/status`` (``Uid:`` real effective saved fs)."""
    try:
        for line in (proc / str(pid) / "status").read_text(errors="replace").splitlines():
            if line.startswith("Uid:"):
                fields = line.split()
                return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    except OSError:
        return None
    return None


def attribute(
    maps: GpuMaps,
    gpus: Mapping[int, GpuSeen] | None,
    now: datetime,
    proc: Path | str = "/proc",
) -> list[AttributionSample]:
    """The cycle's attribution samples from map files and (if known) GPU process lists."""
    proc = Path(proc)
    index_of_uuid = {g.uuid: g.index for g in (gpus or {}).values() if g.uuid}
    found: dict[tuple[int, str], _Found] = {}

    # 1. prolog map files, each file once per (NVML index, job); by index and by UUID name
    named: list[tuple[int | None, str | None, GpuMapEntry]] = [
        (i, None, e) for i, e in sorted(maps.by_index.items())
    ]
    named += [(None, u, e) for u, e in sorted(maps.by_uuid.items())]
    for file_index, file_uuid, entry in named:
        uuid = entry.gpu_uuid or file_uuid
        index = index_of_uuid.get(uuid) if uuid else None
        if index is None:
            index = entry.gpu_index if entry.gpu_index is not None else file_index
        if index is None:  # a UUID-only file for a GPU this cycle did not see
            log.debug("GPU map for UUID %s: GPU not seen, no index to report it under", uuid)
            continue
        key = (index, entry.job_id)
        if key not in found:
            found[key] = _Found("prolog", entry, uuid)

    # 2./3. processes on each GPU -> their job by cgroup, else environ
    known: dict[int, tuple[str | None, str | None]] = {}
    for gpu in (gpus or {}).values():
        for pid in gpu.pids or ():
            if pid not in known:
                known[pid] = job_id_of_pid(pid, proc)
            job, source = known[pid]
            if job is None or source is None:
                continue
            item = found.setdefault((gpu.index, job), _Found(source))
            if _RANK[source] < _RANK[item.source]:
                item.source = source
            item.pids.add(pid)

    # user/uid: the job's map entry on any GPU, else the process owner's uid
    users = {k[1]: (f.entry.user, f.entry.uid) for k, f in found.items() if f.entry is not None}
    out: list[AttributionSample] = []
    for (index, job), item in sorted(found.items()):
        seen = (gpus or {}).get(index)
        if item.pids:
            pids: list[int] | None = sorted(item.pids)
        else:  # [] = the GPU's process list was read and had none of this job's
            pids = [] if seen is not None and seen.pids is not None else None
        user, uid = users.get(job, (None, None))
        if uid is None and item.pids:
            uid = _uid_of(min(item.pids), proc)
        out.append(
            AttributionSample(
                ts=now,
                gpu_index=index,
                gpu_uuid=(seen.uuid if seen is not None and seen.uuid else item.uuid),
                job_id=job,
                user=user,
                uid=uid,
                source=item.source,  # type: ignore[arg-type]
                pids=pids,
            )
        )
    return out


class AttributionCollector(Collector):
    """Reads the map files and the board each cycle; nothing to report is an empty list."""

    name = "attribution"

    def __init__(
        self, paths: HostPaths, board: GpuProcessBoard | None = None, *, max_age_s: float = 5.0
    ) -> None:
        self.paths = paths
        self.board = GPU_PROCESSES if board is None else board
        self.max_age_s = max_age_s

    def collect(self, now: datetime) -> list[AttributionSample]:
        # read_gpu_maps takes the run dir and appends "gpu"
        maps = read_gpu_maps(self.paths.gpu_map_dir.parent)
        return attribute(maps, self.board.latest(now, self.max_age_s), now, self.paths.proc)


@register("attribution")
def attribution_collector(settings: Settings) -> AttributionCollector:
    """Always on: with no prolog installed and no GPU processes it reports nothing."""
    return AttributionCollector(settings.host_paths, max_age_s=settings.agent.interval_s / 2)
