"""One node: its GPUs over the last hours, the jobs that held them, their faults, a timeline.

The web view's node page, reached from the overview's heat map (one row per node) and from
every job that ran there. Read from the per-minute rollups, like the job view; the jobs'
causes are their evaluations' shown verdicts (:mod:`gpuwatch.views.evaluations`), so the page
names the same cause as every other surface.

A card split into MIG instances is one card (:attr:`NodeView.cards`) listed with its
instances after it: the card's row carries its power, temperature and faults and no
utilization (``split``), each instance's row its activity (GPM graphics engine, see
docs/gpu.md) and its share of the card; the utilization chart has a line per instance and
none for the card, so no activity is shown twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from gpuwatch.sql.resolution import tier_for
from gpuwatch.sql.rollups import xid_codes
from gpuwatch.sql.schema import gpus, job_gpus, nodes, slurm_jobs
from gpuwatch.views._job_series import gpu_span_columns, mean
from gpuwatch.views.evaluations import latest_evaluations
from gpuwatch.views.faults import GpuFaults

#: the span a node page shows by default
NODE_HOURS = 6


@dataclass(frozen=True)
class NodeGpu(GpuFaults):
    """One GPU of the node over the span."""

    index: int
    model: str | None
    minutes: int
    util_mean: float | None
    sm_active_mean: float | None
    memory_used_max_bytes: int | None
    memory_total_bytes: int | None
    power_mean_watts: float | None
    xid_codes: tuple[int, ...]
    lost_samples: int
    #: samples with a memory repair pending a GPU reset; with a failed row remap
    reset_pending_samples: int = 0
    remap_failed_samples: int = 0
    #: a MIG instance: its card's index and its share of the card (``card_fraction_ratio``)
    parent_index: int | None = None
    card_fraction: float | None = None
    #: a card split into MIG instances in the span: its activity is its instances'
    split: bool = False


@dataclass(frozen=True)
class NodeJob:
    """A job that held GPUs of the node during the span."""

    job_id: str
    user: str | None
    account: str | None
    state: str | None
    start_at: datetime | None
    end_at: datetime | None
    gpu_indices: tuple[int, ...]
    cause: str | None  # the evaluation's shown verdict; None: nothing wasted, or not evaluated
    gpu_hours_wasted: float | None


@dataclass(frozen=True)
class NodeView:
    name: str
    last_seen_at: datetime | None
    agent_version: str | None
    start: datetime
    end: datetime
    gpus: tuple[NodeGpu, ...]
    jobs: tuple[NodeJob, ...]
    #: GPU index -> per-minute mean utilization over the span (None: no data that minute)
    util: dict[int, list[tuple[datetime, float | None]]]
    simulated: bool

    @property
    def cards(self) -> int:
        """Physical cards in the span: whole ones and split ones, not their instances."""
        return sum(1 for g in self.gpus if g.parent_index is None)

    @property
    def mig_instances(self) -> int:
        return sum(1 for g in self.gpus if g.parent_index is not None)


def node_view(engine: sa.Engine, name: str, now: datetime, hours: int = NODE_HOURS) -> NodeView | None:
    """The node called ``name`` over the ``hours`` before ``now``; None for a node never seen."""
    end = now.replace(second=0, microsecond=0)
    start = end - timedelta(hours=hours)
    with engine.connect() as conn:
        node = conn.execute(sa.select(nodes).where(nodes.c.name == name)).mappings().first()
        if node is None:
            return None
        tier = tier_for(conn, start, end)  # a span older than the minutes kept: hourly
        g, at = tier.gpu.c, tier.time(tier.gpu)
        in_span = (g.node_id == node["id"], *tier.within(tier.gpu, start, end))
        minute_rows = conn.execute(
            sa.select(g.gpu_index, at, g.util_gpu_ratio_sum, g.util_gpu_ratio_n, g.simulated)
            .where(*in_span)
            .order_by(g.gpu_index, at)
        ).all()
        totals = conn.execute(
            sa.select(g.gpu_index, tier.minutes(tier.gpu).label("minutes"), *gpu_span_columns(conn, tier.gpu))
            .where(*in_span)
            .group_by(g.gpu_index)
        ).all()
        models = _models(conn, node["id"])
        shares = _mig_shares(conn, node["id"])
        jobs = _jobs(conn, name, start, end)
        util: dict[int, list[tuple[datetime, float | None]]] = {}
        simulated = False
        for index, minute, total, n, sim in minute_rows:
            util.setdefault(int(index), []).append((minute, mean(total, n)))
            simulated = simulated or bool(sim)
    seen = {int(r.gpu_index) for r in totals}
    split = {parent for index, (parent, _) in shares.items() if index in seen}
    for card in split:  # the card's own activity line would show its instances' work twice
        util.pop(card, None)
    listed = [
        NodeGpu(
            index=int(r.gpu_index),
            model=models.get(int(r.gpu_index)),
            minutes=int(r.minutes),
            util_mean=None if int(r.gpu_index) in split else mean(r.util_sum, r.util_n),
            sm_active_mean=None if int(r.gpu_index) in split else mean(r.sm_sum, r.sm_n),
            memory_used_max_bytes=None if r.memory_max is None else int(r.memory_max),
            memory_total_bytes=None if r.memory_total is None else int(r.memory_total),
            power_mean_watts=mean(r.power_sum, r.power_n),
            xid_codes=xid_codes(r.xid_text),
            lost_samples=int(r.lost or 0),
            reset_pending_samples=int(r.reset_pending or 0),
            remap_failed_samples=int(r.remap_failed or 0),
            parent_index=shares.get(int(r.gpu_index), (None, None))[0],
            card_fraction=shares.get(int(r.gpu_index), (None, None))[1],
            split=int(r.gpu_index) in split,
        )
        for r in totals
    ]
    # each card, then its instances
    per_gpu = tuple(
        sorted(
            listed,
            key=lambda g: (
                g.index if g.parent_index is None else g.parent_index,
                g.parent_index is not None,
                g.index,
            ),
        )
    )
    return NodeView(
        name=name,
        last_seen_at=node["last_seen_at"],
        agent_version=node["agent_version"],
        start=start,
        end=end,
        gpus=per_gpu,
        jobs=jobs,
        util=util,
        simulated=simulated,
    )


def _models(conn: sa.Connection, node_id: int) -> dict[int, str]:
    """GPU index -> its model name, as the agent last registered it (``gpus``)."""
    rows = conn.execute(sa.select(gpus.c.gpu_index, gpus.c.name).where(gpus.c.node_id == node_id)).all()
    return {int(index): name for index, name in rows if name}


def _mig_shares(conn: sa.Connection, node_id: int) -> dict[int, tuple[int, float | None]]:
    """MIG instance index -> (its card's index, its share of the card), as registered (``gpus``)."""
    g = gpus.c
    rows = conn.execute(
        sa.select(g.gpu_index, g.parent_gpu_index, g.card_fraction_ratio).where(
            g.node_id == node_id, g.parent_gpu_index.is_not(None)
        )
    ).all()
    return {int(index): (int(parent), None if f is None else float(f)) for index, parent, f in rows}


def _jobs(conn: sa.Connection, name: str, start: datetime, end: datetime) -> tuple[NodeJob, ...]:
    """Jobs that held GPUs of the node during the span, newest first, with their shown verdict."""
    j, jg = slurm_jobs.c, job_gpus.c
    rows = conn.execute(
        sa.select(j.job_id, j.user_name, j.account, j.state, j.start_at, j.end_at, jg.gpu_index)
        .join(job_gpus, jg.job_id == j.job_id)
        .where(
            jg.node == name,
            j.start_at.is_not(None),
            j.start_at < end,
            sa.or_(j.end_at.is_(None), j.end_at >= start),
        )
    ).all()
    held: dict[str, list[int]] = {}
    facts: dict[str, sa.Row] = {}
    for r in rows:
        held.setdefault(r.job_id, []).append(int(r.gpu_index))
        facts[r.job_id] = r
    evaluations = latest_evaluations(conn, job_ids=sorted(held)) if held else {}
    out = []
    for job_id, indices in held.items():
        r = facts[job_id]
        found = evaluations.get(job_id)
        shown = found.shown if found is not None else None
        out.append(
            NodeJob(
                job_id=job_id,
                user=r.user_name,
                account=r.account,
                state=r.state,
                start_at=r.start_at,
                end_at=r.end_at,
                gpu_indices=tuple(sorted(indices)),
                cause=None if shown is None else shown.cause,
                gpu_hours_wasted=None if shown is None else shown.gpu_hours_wasted,
            )
        )
    return tuple(sorted(out, key=lambda job: (job.start_at is None, job.start_at), reverse=True))
