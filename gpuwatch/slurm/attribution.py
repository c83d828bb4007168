"""Agent side of GPU -> job attribution (DESIGN.md, "GPU -> job attribution").

Three sources, most trusted first:

1. The prolog's GPU map files (``deploy/slurm/prolog.sh``): ``<base>/gpu/<index>`` and
   ``<base>/gpu/<UUID>``, base ``/run/gpuwatch`` (``GPUWATCH_RUN_DIR``). They name idle GPUs
   too, which process mapping cannot. Format (one ``key=value`` per line, unknown keys
   ignored so the prolog may grow)::

       job_id=25
       uid=2001
       user=alice
       step=
       gpu_index=0
       gpu_uuid=GPU-8e3c...      (only when the prolog could read it)
       written_at=1796218396     (Unix epoch)

   ``<index>`` is Slurm's GRES index from ``SLURM_JOB_GPUS``; it equals the ``/dev/nvidia<N>``
   minor of the gres.conf ``File=`` (in order), which is not always the NVML index. The
   UUID file is the safe key when present.
2. A GPU process's ``/proc/<pid>/cgroup``: ``job_<id>`` under a Slurm directory.
3. Its ``/proc/<pid>/environ``: ``SLURM_JOB_ID`` (a process can change its own environment,
   so this is the least trusted).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_RUN_DIR = Path("/run/gpuwatch")
_JOB_ID = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class GpuMapEntry:
    """One prolog GPU map file: which job the prolog gave this GPU to."""

    job_id: str
    uid: int | None
    user: str | None
    step: str | None
    gpu_index: int | None
    gpu_uuid: str | None
    written_at: datetime | None


def parse_gpu_map(text: str) -> GpuMapEntry | None:
    """One map file's text; ``None`` if it holds no valid ``job_id`` (torn or foreign file)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    job_id = fields.get("job_id", "")
    if not _JOB_ID.match(job_id):
        return None
    uid, idx, ts = fields.get("uid", ""), fields.get("gpu_index", ""), fields.get("written_at", "")
    return GpuMapEntry(
        job_id=job_id,
        uid=int(uid) if uid.isdigit() else None,
        user=fields.get("user") or None,
        step=fields.get("step") or None,
        gpu_index=int(idx) if idx.isdigit() else None,
        gpu_uuid=fields.get("gpu_uuid") or None,
        written_at=datetime.fromtimestamp(int(ts), tz=timezone.utc) if ts.isdigit() else None,
    )


@dataclass(frozen=True)
class GpuMaps:
    """All map files of one node, keyed both ways."""

    by_index: dict[int, GpuMapEntry]
    by_uuid: dict[str, GpuMapEntry]


def read_gpu_maps(base_dir: Path | str = DEFAULT_RUN_DIR) -> GpuMaps:
    """Read ``<base_dir>/gpu/*``; a missing directory (no prolog installed) gives empty maps.

    Dot-files are the prolog's temporaries (it writes ``.name.<job>.<pid>`` then renames),
    so they are skipped; unreadable or invalid files are skipped with a debug log.
    """
    by_index: dict[int, GpuMapEntry] = {}
    by_uuid: dict[str, GpuMapEntry] = {}
    gpu_dir = Path(base_dir) / "gpu"
    try:
        paths = sorted(gpu_dir.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return GpuMaps(by_index, by_uuid)
    except OSError as exc:
        log.warning("cannot list %s: %s", gpu_dir, exc)
        return GpuMaps(by_index, by_uuid)
    for path in paths:
        if path.name.startswith("."):
            continue
        try:
            entry = parse_gpu_map(path.read_text(encoding="utf-8", errors="replace"))
        except OSError as exc:  # removed by the epilog between listing and reading
            log.debug("cannot read %s: %s", path, exc)
            continue
        if entry is None:
            log.debug("ignoring invalid GPU map file %s", path)
            continue
        if path.name.isdigit():
            by_index[int(path.name)] = entry
        else:
            by_uuid[path.name] = entry
    return GpuMaps(by_index, by_uuid)


# job_<id> as a path component; the id is what follows, up to the next '/'.
_CGROUP_JOB = re.compile(r"/job_(?P<id>[^/\s]+)")


def job_id_from_cgroup(text: str) -> str | None:
    """The Slurm job id in ``/proc/<pid>/cgroup`` content, or ``None``.

    Recognised (the job directory must sit below a ``slurm`` directory, so other software's
    ``job_*`` cgroups are not mistaken for Slurm's):

    - v1 (``proctrack/cgroup`` + ``cgroup/v1``, seen here on 22.05):
      ``4:memory:/slurm_vm/uid_2001/job_25/step_batch/task_0`` or ``/slurm/uid_1000/job_123/...``;
    - v2 (``cgroup/v2``, 22.05+): ``0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0``.

    Slurm 26.05+ may name job directories by SLUID (a non-numeric unique id) instead of the
    job id; such a directory cannot be mapped to a job id here, so it gives ``None`` (logged)
    and the caller falls back to ``environ`` or the prolog map.
    """
    for line in text.splitlines():
        _, _, path = line.rpartition(":")  # hierarchy-id:controllers:path
        m = _CGROUP_JOB.search(path)
        if not m or "slurm" not in path[: m.start()]:
            continue
        job = m.group("id")
        if _JOB_ID.match(job):
            return job
        log.debug("Slurm cgroup job dir %r is not a numeric job id (SLUID?), ignoring", job)
        return None
    return None


def job_id_from_environ(data: bytes) -> str | None:
    """``SLURM_JOB_ID`` (or the old ``SLURM_JOBID``) from ``/proc/<pid>/environ`` bytes."""
    found: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in (b"SLURM_JOB_ID", b"SLURM_JOBID"):
            found[key.decode()] = value.decode("ascii", "replace").strip()
    for key in ("SLURM_JOB_ID", "SLURM_JOBID"):
        if _JOB_ID.match(found.get(key, "")):
            return found[key]
    return None


def job_id_of_pid(pid: int, proc: Path | str = "/proc") -> tuple[str | None, str | None]:
    """(job id, "process" or "environ") for a pid: cgroup first, then environ; ``(None, None)``.

    Errors (the process exited, no permission on another user's environ) give ``None``: the
    agent simply has no attribution for that pid this cycle.
    """
    base = Path(proc) / str(pid)
    try:
        job = job_id_from_cgroup((base / "cgroup").read_text(errors="replace"))
        if job:
            return job, "process"
    except OSError:
        pass
    try:
        job = job_id_from_environ((base / "environ").read_bytes())
        if job:
            return job, "environ"
    except OSError:
        pass
    return None, None
