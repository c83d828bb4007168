"""``scontrol show job -d -o`` -> :class:`SlurmJob` list: the fallback when ``--json`` is missing.

Works on any Slurm release (the ``-o`` one-line form and ``-d`` per-node detail are decades
old), so it is the fallback for builds without the JSON plugins. One line per job of
``Key=Value`` pairs separated by spaces; ``-d`` adds, per group of nodes with the same layout,
``Nodes=<hostlist> CPU_IDs=.. Mem=.. GRES=gpu:fake:2(IDX:0-1)``, so ``Nodes=`` repeats and
the pairs are read in order, not as a dict. Values may contain spaces (``JobName``,
``Reason=(ReqNodeNotAvail, ...)``): a word without ``=`` continues the previous value.
Times are the cluster's local time (see :func:`gpuwatch.slurm.values.local_time`).
"""

from __future__ import annotations

import logging
import re
from datetime import tzinfo

from gpuwatch.slurm import gres, hostlist
from gpuwatch.slurm import values as v
from gpuwatch.slurm.errors import SlurmParseError
from gpuwatch.slurm.model import SlurmJob, normalize_state

log = logging.getLogger(__name__)

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_:/]*=")
_NAME_ID = re.compile(r"^(?P<name>.*?)\((?P<id>\d+)\)$")


def tokenize(line: str) -> list[tuple[str, str]]:
    """``Key=Value`` pairs of one ``-o`` line, in order, duplicates kept."""
    pairs: list[tuple[str, str]] = []
    for word in line.split():
        if _KEY.match(word):
            key, _, value = word.partition("=")
            pairs.append((key, value))
        elif pairs:
            key, value = pairs[-1]
            pairs[-1] = (key, f"{value} {word}")
        else:
            log.debug("scontrol: stray word %r before the first key", word)
    return pairs


def _name_and_id(value: str | None) -> tuple[str | None, int | None]:
    """``alice(2001)`` -> ``("alice", 2001)``; ``2001`` alone (no passwd entry) -> ``(None, 2001)``."""
    s = v.text(value)
    if s is None:
        return None, None
    m = _NAME_ID.match(s)
    if m:
        return v.text(m.group("name")), int(m.group("id"))
    if s.isdigit():
        return None, int(s)
    return s, None


def job_from_pairs(pairs: list[tuple[str, str]], tz: tzinfo | None = None) -> SlurmJob | None:
    """One job from its ``Key=Value`` pairs (``None`` without ``JobId``)."""
    first: dict[str, str] = {}
    gpu_indices: dict[str, tuple[int, ...]] = {}
    detail_nodes: list[str] = []
    holds_mig = False  # a MIG instance on any node: no GPU map (see squeue.gpu_map)
    for i, (key, value) in enumerate(pairs):
        first.setdefault(key, value)
        if key == "Nodes":  # -d detail group: Nodes= CPU_IDs= Mem= GRES=
            group = hostlist.expand_or_empty(value)
            detail_nodes.extend(group)
            for k2, val2 in pairs[i + 1 : i + 5]:
                if k2 == "Nodes":
                    break
                if k2 == "GRES":
                    holds_mig = holds_mig or gres.holds_mig(val2)
                    idx = gres.gpu_indices(val2)
                    if idx:
                        for node in group:
                            gpu_indices[node] = idx
    if holds_mig:
        gpu_indices = {}
    job_id = v.text(first.get("JobId"))
    if not job_id or not job_id.isdigit():
        return None
    user, uid = _name_and_id(first.get("UserId"))
    tres = gres.parse_tres(v.text(first.get("TRES")))
    gpus = gres.gpus_from_tres(tres)
    if gpus is None and v.text(first.get("JOB_GRES")):
        gpus = gres.gpu_count(first["JOB_GRES"])
    if gpus is None and tres:  # TRES known and no GPU in it: the job has none
        gpus = 0
    nodes = hostlist.expand_or_empty(v.text(first.get("NodeList"))) or detail_nodes
    state = normalize_state(v.text(first.get("JobState")))
    code, signal = v.exit_pair(first.get("ExitCode"))
    array_job = v.text(first.get("ArrayJobId"))
    return SlurmJob(
        job_id=job_id,
        source="scontrol",
        name=v.text(first.get("JobName")),
        user=user,
        uid=uid,
        account=v.text(first.get("Account")),
        partition=v.text(first.get("Partition")),
        qos=v.text(first.get("QOS")),
        state=state,
        state_reason=v.text(first.get("Reason")),
        array_job_id=array_job,
        array_task_id=v.text(first.get("ArrayTaskId")) if array_job else None,
        submit=v.local_time(first.get("SubmitTime"), tz),
        start=v.local_time(first.get("StartTime"), tz),
        end=v.local_time(first.get("EndTime"), tz),
        time_limit_s=v.duration_s(first.get("TimeLimit")),
        elapsed_s=v.duration_s(first.get("RunTime")),
        nodes=tuple(nodes),
        cpus=int(first["NumCPUs"]) if first.get("NumCPUs", "").isdigit() else None,
        memory_bytes=tres.get("mem"),
        gpus=gpus,
        gpu_indices=gpu_indices,
        exit_code=code if state not in ("RUNNING", "PENDING") else None,
        exit_signal=signal,
        tres=tres,
    )


def parse_scontrol_jobs(text: str | bytes, tz: tzinfo | None = None) -> list[SlurmJob]:
    """All jobs of ``scontrol show job -d -o`` output (one job per non-empty line).

    ``No jobs in the system`` gives ``[]``; text with no ``JobId=`` line at all raises
    :class:`SlurmParseError` (it is not scontrol job output).
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines or lines == ["No jobs in the system"]:
        return []
    jobs: list[SlurmJob] = []
    seen_job_line = False
    for line in lines:
        if not line.startswith("JobId="):
            log.debug("scontrol: skipping non-job line %r", line[:80])
            continue
        seen_job_line = True
        try:
            job = job_from_pairs(tokenize(line), tz)
        except Exception:
            log.warning("skipping unreadable scontrol line %r", line[:80], exc_info=True)
            continue
        if job is not None:
            jobs.append(job)
    if not seen_job_line:
        raise SlurmParseError(f"scontrol show job: no JobId= line in output starting {lines[0][:80]!r}")
    return jobs
