"""A GPU's faults over a span in words: the same sentence on the node page, the job page,
``gpuwatch job ID`` and its plot; and which GPUs faulted in a span, for the node list and the
overview."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpuwatch.classify.xid import describe, owner_of
from gpuwatch.sql.folding import join_distinct
from gpuwatch.sql.rollups import xid_codes
from gpuwatch.sql.schema import FAULTED, gpu_minutes, nodes


def fault_text(
    codes: tuple[int, ...], lost_samples: int, reset_pending_samples: int = 0, remap_failed_samples: int = 0
) -> str | None:
    """``XID 79 (GPU has fallen off the bus); admin; lost 12 sample(s)``: a GPU's XIDs with who
    owns them (``classify/xid.py``), the samples it sent as lost, and its memory's repairs (a
    row remap or page retirement waiting for a GPU reset; a row remap that failed), which are
    the admins' to act on; None when nothing went wrong."""
    parts = []
    if codes:
        parts.append(f"{describe(codes)}; {owner_of(codes).value}")
    if lost_samples:
        parts.append(f"lost {lost_samples} sample(s)")
    if remap_failed_samples:
        parts.append(f"row remapping failed ({remap_failed_samples} sample(s)): the GPU needs service; admin")
    if reset_pending_samples:
        parts.append(f"memory repair pending a GPU reset ({reset_pending_samples} sample(s)); admin")
    return "; ".join(parts) or None


class GpuFaults:
    """A GPU's record over a span (the job page's, the node page's) that carries its XIDs, the
    samples it sent as lost and its memory's repairs, and so says its faults in words."""

    xid_codes: tuple[int, ...]
    lost_samples: int
    #: samples with a row remap or page retirement waiting for a GPU reset; with a failed remap
    reset_pending_samples: int = 0
    remap_failed_samples: int = 0

    @property
    def fault(self) -> str | None:
        """``XID 79 (GPU has fallen off the bus); admin`` or ``lost 12 sample(s)``; None when fine."""
        return fault_text(
            self.xid_codes, self.lost_samples, self.reset_pending_samples, self.remap_failed_samples
        )


@dataclass(frozen=True)
class NodeGpuFault(GpuFaults):
    """A GPU of a node that raised XIDs, sent samples as lost or had its memory repaired in the
    window (the rolled-up minutes: what the node page and the job pages show, in the same words)."""

    gpu_index: int
    xid_codes: tuple[int, ...]
    lost_samples: int
    reset_pending_samples: int = 0
    remap_failed_samples: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"gpu_index": self.gpu_index, "xid_codes": list(self.xid_codes),
                "lost_samples": self.lost_samples, "reset_pending_samples": self.reset_pending_samples,
                "remap_failed_samples": self.remap_failed_samples, "fault": self.fault}  # fmt: skip


def gpu_faults(
    conn: sa.Connection, since: datetime, until: datetime | None = None
) -> dict[int, tuple[NodeGpuFault, ...]]:
    """Node id -> its GPUs with a fault (:data:`FAULTED`) in the minutes rolled up from ``since``
    (to ``until``, exclusive); nodes whose GPUs were fine are left out. Reads only the faulted
    GPU-minutes, through their partial index."""
    g = gpu_minutes.c
    rows = conn.execute(
        sa.select(g.node_id, g.gpu_index, join_distinct(conn, g.xid_codes).label("xid_text"),
                  sa.func.sum(g.lost_samples).label("lost"), *memory_repair_columns(gpu_minutes))
        .where(g.minute >= since, FAULTED, *(() if until is None else (g.minute < until,)))
        .group_by(g.node_id, g.gpu_index)
        .order_by(g.node_id, g.gpu_index)
    ).all()  # fmt: skip
    out: dict[int, list[NodeGpuFault]] = {}
    for r in rows:
        out.setdefault(r.node_id, []).append(
            NodeGpuFault(int(r.gpu_index), xid_codes(r.xid_text), int(r.lost or 0), *memory_repairs(r))
        )
    return {node_id: tuple(found) for node_id, found in out.items()}


def memory_repair_columns(table: sa.FromClause) -> list[sa.Label[Any]]:
    """The span's sums of a GPU's memory repairs (pending a reset, failed), from minutes or hours."""
    return [
        sa.func.sum(table.c.reset_pending_samples).label("reset_pending"),
        sa.func.sum(table.c.remap_failed_samples).label("remap_failed"),
    ]


def memory_repairs(row: Any) -> tuple[int, int]:
    """(samples pending a reset, samples with a failed remap) of a row with :func:`memory_repair_columns`."""
    return int(row.reset_pending or 0), int(row.remap_failed or 0)


def faults_by_node(
    conn: sa.Connection, since: datetime, until: datetime | None = None
) -> dict[str, tuple[NodeGpuFault, ...]]:
    """:func:`gpu_faults` keyed by node name, nodes in name order (the overview, the admin digest)."""
    found = gpu_faults(conn, since, until)
    if not found:
        return {}
    names = dict(conn.execute(sa.select(nodes.c.id, nodes.c.name).where(nodes.c.id.in_(sorted(found)))).all())
    return {
        names[node_id]: found[node_id]
        for node_id in sorted(found, key=lambda i: names.get(i, ""))
        if node_id in names
    }
