"""Which nodes report, and which of their GPUs faulted: the one node list behind ``gpuwatch
nodes`` and the daemon's ``/api/v1/nodes``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from gpuwatch.clock import utcnow
from gpuwatch.sql.gpu_readings import gpu_samples_per_node
from gpuwatch.sql.readings import samples_per_node
from gpuwatch.sql.schema import SAMPLE_KINDS, gpus, ingested_batches, nodes
from gpuwatch.views.faults import NodeGpuFault, gpu_faults


@dataclass(frozen=True)
class NodeSummary:
    name: str
    last_seen_at: datetime | None
    agent_version: str | None
    #: cards the node registered (``gpus`` rows that are no MIG instance): a split card once
    gpus: int
    batches: int
    samples_window: int
    gpu_samples_window: int
    window_s: float
    #: MIG instances the node reported in the window (each also a GPU of its own in the tables)
    mig_instances: int = 0
    #: its GPUs that faulted in the window, by index
    faults: tuple[NodeGpuFault, ...] = ()

    def silent_since(self, now: datetime, quiet: timedelta) -> bool:
        """Whether nothing came from the node in the ``quiet`` before ``now`` (or ever)."""
        return self.last_seen_at is None or self.last_seen_at < now - quiet

    @property
    def faults_text(self) -> str:
        """``gpu3: XID 79 (GPU has fallen off the bus); admin | gpu5: lost 12 sample(s)``; '' for none."""
        return " | ".join(f"gpu{f.gpu_index}: {f.fault}" for f in self.faults)

    def as_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["last_seen_at"] = self.last_seen_at.isoformat() if self.last_seen_at else None
        doc["faults"] = [f.as_json() for f in self.faults]
        return doc


def node_summaries(
    engine: sa.Engine,
    window: timedelta = timedelta(hours=1),
    *,
    now: datetime | None = None,
    faulty: bool = False,
    silent: timedelta | None = None,
) -> list[NodeSummary]:
    """One row per node: last contact, GPUs known, batches ever, samples and GPU faults in the
    ``window`` before ``now``. ``faulty``: only nodes with a GPU fault in it; ``silent``: only
    nodes not heard from in that span before ``now`` (or never) — ``gpuwatch nodes --faulty
    --silent`` and the web view's ``/nodes?faulty=1&silent=MIN``."""
    now = now or utcnow()
    since = now - window
    with engine.connect() as conn:
        gpu_counts = dict(
            conn.execute(
                sa.select(gpus.c.node_id, sa.func.count())
                .where(gpus.c.parent_gpu_index.is_(None))
                .group_by(gpus.c.node_id)
            ).all()
        )
        mig_counts = dict(
            conn.execute(
                sa.select(gpus.c.node_id, sa.func.count())
                .where(gpus.c.parent_gpu_index.is_not(None), gpus.c.last_seen_at >= since)
                .group_by(gpus.c.node_id)
            ).all()
        )
        batch_counts = dict(
            conn.execute(
                sa.select(ingested_batches.c.node_id, sa.func.count()).group_by(ingested_batches.c.node_id)
            ).all()
        )
        gpu_window = gpu_samples_per_node(conn, since)
        window_counts = dict(gpu_window)
        for kind in SAMPLE_KINDS:
            if kind == "gpu":  # counted above
                continue
            for node_id, n in samples_per_node(conn, kind, since).items():
                window_counts[node_id] = window_counts.get(node_id, 0) + n
        faults = gpu_faults(conn, since)
        rows = conn.execute(
            sa.select(nodes.c.id, nodes.c.name, nodes.c.last_seen_at, nodes.c.agent_version).order_by(
                nodes.c.name
            )
        ).all()
    listed = [
        NodeSummary(
            name=r.name,
            last_seen_at=r.last_seen_at,
            agent_version=r.agent_version,
            gpus=gpu_counts.get(r.id, 0),
            batches=batch_counts.get(r.id, 0),
            samples_window=window_counts.get(r.id, 0),
            gpu_samples_window=gpu_window.get(r.id, 0),
            window_s=window.total_seconds(),
            mig_instances=mig_counts.get(r.id, 0),
            faults=faults.get(r.id, ()),
        )
        for r in rows
    ]
    return [n for n in listed if (n.faults or not faulty) and (silent is None or n.silent_since(now, silent))]
