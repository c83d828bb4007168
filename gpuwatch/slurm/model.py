"""The one record every Slurm parser produces: :class:`SlurmJob`.

All parsers (``squeue --json``, ``scontrol show job -d -o``, ``sacct --json``, ``sacct -P``)
fill the same fields, so the daemon can correlate (node, GPU index, time) without caring
where a record came from; a field the source does not carry is ``None`` (or empty), never a
made-up zero. ``source`` says which parser made it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

log = logging.getLogger(__name__)

# Base job states (slurm.h ``enum job_states``) plus the ones Slurm prints for flags.
JOB_STATES = frozenset(
    {
        "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
        "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
        "COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING", "REVOKED", "SIGNALING",
        "SPECIAL_EXIT", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "REQUEUE_FED", "REQUEUE_HOLD",
    }
)  # fmt: skip
# squeue/sacct short codes (``%t``, ``-o State`` with compact output).
_SHORT_STATES = {
    "PD": "PENDING", "R": "RUNNING", "S": "SUSPENDED", "CD": "COMPLETED", "CA": "CANCELLED",
    "F": "FAILED", "TO": "TIMEOUT", "NF": "NODE_FAIL", "PR": "PREEMPTED", "BF": "BOOT_FAIL",
    "DL": "DEADLINE", "OOM": "OUT_OF_MEMORY", "CG": "COMPLETING", "CF": "CONFIGURING",
    "RQ": "REQUEUED", "RS": "RESIZING", "RV": "REVOKED", "SE": "SPECIAL_EXIT", "ST": "STOPPED",
}  # fmt: skip
# Base states win over flag-like states when Slurm 23.02+ gives a list (["RUNNING", "COMPLETING"]).
_BASE_STATES = (
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
    "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
)  # fmt: skip
TERMINAL_STATES = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
     "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"}
)  # fmt: skip
#: states in which a job still holds its GPUs (what the classifier evaluates, the overview lists)
HOLDING_STATES = ("RUNNING", "COMPLETING", "SUSPENDED")


def normalize_state(raw: str | Iterable[str] | None) -> str | None:
    """One upper-case state from whatever Slurm printed.

    - 22.05 JSON: ``"RUNNING"``; 23.02+ data_parser: ``["RUNNING"]`` or ``["PENDING", "REQUEUED"]``
      (base state first, then flags: the first base state wins);
    - ``sacct``: ``"CANCELLED by 0"`` (the uid that cancelled), ``"CANCELLED+"`` when truncated;
    - short codes ``R``, ``PD``, ``CA``...; ``OOM`` for ``OUT_OF_MEMORY``.

    Unknown words are returned upper-cased (and logged) rather than dropped.
    """
    if raw is None:
        return None
    if isinstance(raw, str):
        items = [raw]
    elif isinstance(raw, (list, tuple)):
        items = [r for r in raw if isinstance(r, str)]
    else:
        log.debug("unexpected Slurm job state value %r", raw)
        return None
    found: list[str] = []
    for item in items:
        word = item.strip().split(" ", 1)[0].rstrip("+").upper()
        if not word:
            continue
        word = _SHORT_STATES.get(word, word)
        found.append(word)
    if not found:
        return None
    for word in found:
        if word in _BASE_STATES:
            return word
    if found[0] not in JOB_STATES:
        log.debug("unknown Slurm job state %r", raw)
    return found[0]


def states_in(text: str | None) -> tuple[str, ...]:
    """``RUNNING,PD`` -> ``("RUNNING", "PENDING")`` for a filter someone typed; ValueError naming
    a word Slurm does not know (the CLI's ``--state`` and the web view's ``?state=``)."""
    states = []
    for word in (w.strip() for w in (text or "").split(",")):
        if not word:
            continue
        state = normalize_state(word)
        if state not in JOB_STATES:
            raise ValueError(
                f"{word!r} is not a Slurm job state (e.g. RUNNING, PENDING, COMPLETED or R, PD, CD)"
            )
        states.append(state)
    return tuple(states)


@dataclass(frozen=True)
class SlurmJob:
    """One Slurm job (for an array: one task) as one of Slurm's commands described it.

    ``job_id`` is the raw numeric id Slurm uses in cgroup paths and ``SLURM_JOB_ID`` (for
    array task 18_1 that is e.g. ``"19"``), except from ``sacct -P`` without ``JobIDRaw``, which
    only gives the ``"18_1"`` form. Times are aware UTC. ``end`` of a running job is Slurm's
    expected end (start + time limit), as Slurm reports it. ``memory_bytes`` is the whole job's
    (all nodes), from the allocated (else requested) TRES. ``gpu_indices`` maps each node to
    the GRES indices (``IDX``) of the GPUs allocated there, which is what ``SLURM_JOB_GPUS``
    holds and what the prolog's ``/run/gpuwatch/gpu/<index>`` files are named by; it is empty
    for a job holding a MIG instance, whose ``IDX`` names no card (:mod:`gpuwatch.slurm.gres`).
    """

    job_id: str
    source: str
    name: str | None = None
    user: str | None = None
    uid: int | None = None
    account: str | None = None
    partition: str | None = None
    qos: str | None = None
    state: str | None = None
    state_reason: str | None = None
    array_job_id: str | None = None
    array_task_id: str | None = None
    submit: datetime | None = None
    start: datetime | None = None
    end: datetime | None = None
    time_limit_s: int | None = None
    elapsed_s: int | None = None
    nodes: tuple[str, ...] = ()
    cpus: int | None = None
    memory_bytes: int | None = None
    gpus: int | None = None
    gpu_indices: dict[str, tuple[int, ...]] = field(default_factory=dict, hash=False)
    exit_code: int | None = None
    exit_signal: int | None = None
    tres: dict[str, int] = field(default_factory=dict, hash=False)

    @property
    def display_id(self) -> str:
        """``18_1`` for an array task, else the job id: what users see in ``squeue``."""
        if self.array_job_id and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return self.job_id

    @property
    def finished(self) -> bool:
        """Whether the state is a final one (the job holds no GPU any more)."""
        return self.state in TERMINAL_STATES
