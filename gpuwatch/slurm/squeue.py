"""``squeue --json`` -> :class:`SlurmJob` list, for Slurm 22.05 (v0.0.38) and 23.02+ (v0.0.39+).

Differences handled (recorded 22.05 output in tests/fixtures/slurm/22.05/squeue.json, the newer
documented shape in tests/fixtures/slurm/24.05/):

- ``job_state``: ``"RUNNING"`` (22.05) vs ``["RUNNING"]`` (23.02+).
- numbers/epochs: plain (0 = unset) vs ``{"set", "infinite", "number"}``.
- per-node allocation, in the order ``gres_detail`` follows: ``job_resources.allocated_nodes[]
  .nodename`` (22.05, also 23.02) vs ``job_resources.nodes.allocation[].name`` (23.11+).
- ``exit_code``: the raw wait(2) status (22.05: exit 3 -> 768, SIGKILL -> 9) vs
  ``{"status": [...], "return_code": {...}, "signal": {"id": {...}}}`` (23.02+).
- ``tres_alloc_str`` may lack ``gres/gpu`` (seen with v0.0.44); the GPU count then comes from
  ``gres_detail``.
"""

from __future__ import annotations

import logging
from typing import Any

from gpuwatch.slurm import gres, hostlist
from gpuwatch.slurm import values as v
from gpuwatch.slurm._json import load_document
from gpuwatch.slurm.model import SlurmJob, normalize_state

log = logging.getLogger(__name__)


def parse_squeue_json(data: str | bytes | dict[str, Any]) -> list[SlurmJob]:
    """All jobs of one ``squeue --json`` document; a job that cannot be read is skipped (logged)."""
    jobs: list[SlurmJob] = []
    for raw in load_document(data, "jobs", "squeue --json"):
        try:
            job = job_from_squeue(raw)
        except Exception:  # one odd job must not hide the others
            log.warning("skipping unreadable squeue job %r", raw.get("job_id"), exc_info=True)
            continue
        if job is not None:
            jobs.append(job)
    return jobs


def allocation_nodes(job_resources: Any) -> list[str]:
    """Node names of ``job_resources`` in allocation order (22.05 and 23.11+ shapes)."""
    if not isinstance(job_resources, dict):
        return []
    legacy = job_resources.get("allocated_nodes")
    if isinstance(legacy, list):  # v0.0.38 .. v0.0.39
        return [str(n["nodename"]) for n in legacy if isinstance(n, dict) and n.get("nodename")]
    nodes = job_resources.get("nodes")
    if isinstance(nodes, dict) and isinstance(nodes.get("allocation"), list):  # v0.0.40+
        return [str(n["name"]) for n in nodes["allocation"] if isinstance(n, dict) and n.get("name")]
    return []


def gpu_map(gres_detail: list[str], node_order: list[str]) -> dict[str, tuple[int, ...]]:
    """Pair the per-node ``gres_detail`` entries with node names; nodes without GPUs are left out.

    Slurm writes one entry per allocated node, in the job's node-bitmap order, which is
    the order of both ``job_resources`` and the expanded ``nodes`` hostlist. A job holding a
    MIG instance on any node gets no map at all (:func:`gres.holds_mig`): its ``IDX`` names no
    card, and the whole job is then attributed by the agents (the prolog's MIG UUID files).
    """
    if not gres_detail:
        return {}
    if any(gres.holds_mig(e) for e in gres_detail):
        log.debug("gres_detail %r holds MIG instances: no GPU map from Slurm", gres_detail)
        return {}
    if len(gres_detail) != len(node_order):
        log.debug("gres_detail has %d entries for %d nodes", len(gres_detail), len(node_order))
    out: dict[str, tuple[int, ...]] = {}
    for node, entry in zip(node_order, gres_detail, strict=False):
        idx = gres.gpu_indices(entry)
        if idx:
            out[node] = idx
    return out


def exit_status(value: Any) -> tuple[int | None, int | None]:
    """(exit code, signal) from either exit-code encoding (see module doc)."""
    if isinstance(value, dict):
        code = v.integer(value.get("return_code"))
        sig = value.get("signal")
        signal = None
        if isinstance(sig, dict):
            signal = v.integer(sig.get("id", sig.get("signal_id")))
        return (None, signal) if signal else (code, None)
    raw = v.integer(value)
    if raw is None:
        return None, None
    if raw & 0x7F:  # WIFSIGNALED: no exit code, only the signal
        return None, raw & 0x7F
    return (raw >> 8) & 0xFF, None


def job_from_squeue(raw: dict[str, Any]) -> SlurmJob | None:
    """One squeue job object as a :class:`SlurmJob` (``None`` without a job id)."""
    job_id = v.positive_int(raw.get("job_id"))
    if job_id is None:
        return None
    nodes = hostlist.expand_or_empty(v.text(raw.get("nodes")))
    order = allocation_nodes(raw.get("job_resources")) or nodes
    details = v.string_list(raw.get("gres_detail"))
    tres = gres.parse_tres(v.text(raw.get("tres_alloc_str")) or v.text(raw.get("tres_req_str")))
    gpus = gres.gpus_from_tres(tres)
    if gpus is None and details:
        gpus = sum(gres.gpu_count(e) for e in details)
    if gpus is None and tres:  # TRES known and no GPU in it: the job has none
        gpus = 0
    array_job = v.positive_int(raw.get("array_job_id"))
    array_task = v.integer(raw.get("array_task_id"))
    state = normalize_state(raw.get("job_state"))
    start, end = v.epoch(raw.get("start_time")), v.epoch(raw.get("end_time"))
    limit = v.integer(raw.get("time_limit"))
    code, signal = exit_status(raw.get("exit_code"))
    elapsed = None
    if start and end and state not in ("RUNNING", "PENDING", "SUSPENDED", None):
        elapsed = max(0, int((end - start).total_seconds()))
    return SlurmJob(
        job_id=str(job_id),
        source="squeue-json",
        name=v.text(raw.get("name")),
        user=v.text(raw.get("user_name")),
        uid=v.integer(raw.get("user_id")),
        account=v.text(raw.get("account")),
        partition=v.text(raw.get("partition")),
        qos=v.text(raw.get("qos")),
        state=state,
        state_reason=v.text(raw.get("state_reason")),
        array_job_id=str(array_job) if array_job else None,
        array_task_id=str(array_task) if array_job and array_task is not None else None,
        submit=v.epoch(raw.get("submit_time")),
        start=start,
        end=end,
        time_limit_s=limit * 60 if limit is not None else None,  # minutes in every version
        elapsed_s=elapsed,
        nodes=tuple(nodes),
        cpus=v.integer(raw.get("cpus")),
        memory_bytes=tres.get("mem"),
        gpus=gpus,
        gpu_indices=gpu_map(details, order),
        exit_code=code if state not in ("RUNNING", "PENDING") else None,
        exit_signal=signal,
        tres=tres,
    )
