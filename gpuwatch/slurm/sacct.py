"""``sacct --json`` and ``sacct -P -n -X -o ...`` -> :class:`SlurmJob` list (finished jobs).

``sacct`` is the only source for jobs that left ``squeue`` (after ``MinJobAge``). It has no
per-node GPU indices in any version (accounting stores counts, not ``IDX``), so
``gpu_indices`` is empty and the daemon keeps the indices it saw from ``squeue`` while the
job ran. ``uid`` is not in the output either. ``gpus`` is ``None`` when AllocTRES has no
``gres/gpu``: sacct cannot tell "no GPU" from "GPUs not tracked" (``AccountingStorageTRES``).

JSON shapes: 22.05 (``openapi/dbv0.0.38``): ``state.current`` a string, ``time.*`` plain epochs,
``exit_code.return_code`` an int and ``signal.signal_id``; 23.02+: ``state.current`` a list,
``{"set", "infinite", "number"}`` numbers, ``signal.id`` wrapped. ``tres.allocated`` is a list
of ``{"type", "name", "count"}`` in both (``mem`` counted in MiB); a job that never started
has no ``allocated`` TRES, and its ``requested`` ones stand in (``sacct -P`` ``AllocTRES``
is empty then).

Seen on 22.05.8 (recorded): ``sacct --json`` gives ``exit_code`` ``SUCCESS``/0 for a job that
exited 3 (``sacct -P`` says ``3:0``); a killed job's signal is right. Prefer the text output
where exit codes matter on 22.05.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import tzinfo
from typing import Any

from gpuwatch.slurm import gres, hostlist
from gpuwatch.slurm import values as v
from gpuwatch.slurm._json import load_document
from gpuwatch.slurm.errors import SlurmParseError
from gpuwatch.slurm.model import SlurmJob, normalize_state
from gpuwatch.slurm.squeue import exit_status

log = logging.getLogger(__name__)

# The field list gpuwatch asks for; JobIDRaw gives array tasks their real id (cgroup job_<id>).
DEFAULT_FIELDS: tuple[str, ...] = (
    "JobIDRaw", "JobID", "JobName", "User", "UID", "Account", "Partition", "QOS", "State",
    "ExitCode", "Submit", "Start", "End", "Elapsed", "Timelimit", "AllocTRES", "NodeList",
)  # fmt: skip
# What the recorded fixture (and the brief) used: the common hand-typed list.
SHORT_FIELDS: tuple[str, ...] = (
    "JobID", "JobName", "User", "Account", "Partition", "State", "ExitCode", "Start", "End",
    "Elapsed", "AllocTRES", "NodeList",
)  # fmt: skip


def _tres_list(items: Any) -> dict[str, int]:
    """``[{"type": "gres", "name": "gpu", "count": 2}, ...]`` -> ``{"gres/gpu": 2, ...}`` (mem in bytes)."""
    out: dict[str, int] = {}
    if not isinstance(items, list):
        return out
    for t in items:
        if not isinstance(t, dict) or not t.get("type"):
            continue
        count = v.integer(t.get("count"))
        if count is None:
            continue
        key = str(t["type"]) + (f"/{t['name']}" if t.get("name") else "")
        out[key] = count * (1 << 20) if key == "mem" else count
    return out


def job_from_sacct_json(raw: dict[str, Any]) -> SlurmJob | None:
    """One ``sacct --json`` job (``None`` without a job id)."""
    job_id = v.positive_int(raw.get("job_id"))
    if job_id is None:
        return None
    time = raw.get("time") if isinstance(raw.get("time"), dict) else {}
    state = raw.get("state")
    state_current = state.get("current") if isinstance(state, dict) else state
    array = raw.get("array") if isinstance(raw.get("array"), dict) else {}
    array_job = v.positive_int(array.get("job_id"))
    array_task = v.integer(array.get("task_id"))
    tres_block = raw.get("tres") if isinstance(raw.get("tres"), dict) else {}
    tres = _tres_list(tres_block.get("allocated")) or _tres_list(tres_block.get("requested"))
    required = raw.get("required") if isinstance(raw.get("required"), dict) else {}
    code, signal = exit_status(raw.get("exit_code"))
    limit = v.integer(time.get("limit"))
    user = v.text(raw.get("user"))
    if user is None and isinstance(raw.get("association"), dict):
        user = v.text(raw["association"].get("user"))
    return SlurmJob(
        job_id=str(job_id),
        source="sacct-json",
        name=v.text(raw.get("name")),
        user=user,
        account=v.text(raw.get("account")),
        partition=v.text(raw.get("partition")),
        qos=v.text(raw.get("qos")),
        state=normalize_state(state_current),
        state_reason=v.text(state.get("reason")) if isinstance(state, dict) else None,
        array_job_id=str(array_job) if array_job else None,
        array_task_id=str(array_task) if array_job and array_task is not None else None,
        submit=v.epoch(time.get("submission")),
        start=v.epoch(time.get("start")),
        end=v.epoch(time.get("end")),
        time_limit_s=limit * 60 if limit is not None else None,
        elapsed_s=v.integer(time.get("elapsed")),
        nodes=tuple(hostlist.expand_or_empty(v.text(raw.get("nodes")))),
        cpus=tres.get("cpu") if "cpu" in tres else v.integer(required.get("CPUs")),
        memory_bytes=tres.get("mem"),
        gpus=gres.gpus_from_tres(tres),
        exit_code=code,
        exit_signal=signal,
        tres=tres,
    )


def parse_sacct_json(data: str | bytes | dict[str, Any]) -> list[SlurmJob]:
    """All jobs of one ``sacct --json`` document (steps are not returned as jobs)."""
    jobs: list[SlurmJob] = []
    for raw in load_document(data, "jobs", "sacct --json"):
        try:
            job = job_from_sacct_json(raw)
        except Exception:
            log.warning("skipping unreadable sacct job %r", raw.get("job_id"), exc_info=True)
            continue
        if job is not None:
            jobs.append(job)
    return jobs


def _split_job_id(value: str) -> tuple[str, str | None, str | None]:
    """``18_1`` -> ``("18_1", "18", "1")``; ``25`` -> ``("25", None, None)``; ``18_[3-5]`` kept whole."""
    base, sep, task = value.partition("_")
    if sep and base.isdigit():
        return value, base, task
    return value, None, None


def parse_sacct_parsable(
    text: str | bytes, fields: Sequence[str] = SHORT_FIELDS, tz: tzinfo | None = None
) -> list[SlurmJob]:
    """``sacct -P -n [-X] -o <fields>`` output, ``|``-separated, no header, fields in this order.

    With ``JobIDRaw`` among the fields, ``job_id`` is the raw id and ``JobID`` supplies the
    array form; without it, an array task's ``job_id`` is ``"18_1"``. Step lines (``25.batch``,
    present without ``-X``) are skipped. A line with the wrong number of fields raises
    :class:`SlurmParseError`: the field list does not match the command that produced it.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    names = [f.lower() for f in fields]
    jobs: list[SlurmJob] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) == len(names) + 1 and cols[-1] == "":  # -p (not -P) adds a trailing '|'
            cols = cols[:-1]
        if len(cols) != len(names):
            raise SlurmParseError(f"sacct -P: {len(cols)} fields in {line[:80]!r}, expected {len(names)}")
        row = dict(zip(names, cols, strict=True))
        display = row.get("jobid") or row.get("jobidraw") or ""
        if "." in display or "." in row.get("jobidraw", ""):
            continue  # a step, not a job
        display_id, array_job, array_task = _split_job_id(display)
        job_id = v.text(row.get("jobidraw")) or display_id
        if not job_id:
            continue
        tres = gres.parse_tres(v.text(row.get("alloctres")) or v.text(row.get("reqtres")))
        code, signal = v.exit_pair(row.get("exitcode"))
        uid = row.get("uid", "")
        jobs.append(
            SlurmJob(
                job_id=job_id,
                source="sacct-parsable",
                name=v.text(row.get("jobname")),
                user=v.text(row.get("user")),
                uid=int(uid) if uid.isdigit() else None,
                account=v.text(row.get("account")),
                partition=v.text(row.get("partition")),
                qos=v.text(row.get("qos")),
                state=normalize_state(v.text(row.get("state"))),
                array_job_id=array_job,
                array_task_id=array_task,
                submit=v.local_time(row.get("submit"), tz),
                start=v.local_time(row.get("start"), tz),
                end=v.local_time(row.get("end"), tz),
                time_limit_s=v.duration_s(row.get("timelimit")),
                elapsed_s=v.duration_s(row.get("elapsed")),
                nodes=tuple(hostlist.expand_or_empty(v.text(row.get("nodelist")))),
                cpus=tres.get("cpu"),
                memory_bytes=tres.get("mem"),
                gpus=gres.gpus_from_tres(tres),
                exit_code=code,
                exit_signal=signal,
                tres=tres,
            )
        )
    return jobs
