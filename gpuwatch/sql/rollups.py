"""Per-minute rollups: what the classifier, the CLI and the web view read.

Raw samples (every 10 s per GPU) are summed per (node, GPU, minute) into ``gpu_minutes``,
per (node, job, minute) into ``job_minutes`` and per (node, minute) into ``node_minutes`` (the
host's CPU, memory and network, and its GPUs' minutes summed, for views of every node at once).
Each metric keeps a sum and a count of samples that had it (GPM fields are absent on some
cards), so any window's mean is ``sum(sum) / sum(n)`` over its minutes, and utilization
keeps an 11-bin histogram (bin 0 = exactly 0 %, bin k = (10(k-1), 10k] %) so windows get
p50/p95 and idle fractions without touching raw rows.

The scheduled pass (:meth:`Rollup.run_once`):

1. rolls every whole minute from ``done_until`` up to ``now - lag`` (``lag`` leaves time
   for batches in flight), in chunks;
2. finds batches received since the previous pass whose samples reach back before
   ``done_until`` (a node replaying its spool after an outage) and re-rolls exactly those
   (node, minute) ranges — but never before the raw horizon (``now - retention.raw_days``):
   raw samples older than that may be gone already, so such a minute's rollup rows, made
   when its raw samples were all there, are kept, and the late samples in it are not added
   (they are stored raw, until retention drops them);
3. sums each job's minutes per hour into ``job_hours`` once an hour is complete and settled,
   and again for the hours a late range re-rolled (``sql/job_hours.py``);
4. folds each complete hour of ``gpu_minutes`` and ``node_minutes`` into ``gpu_hours`` and
   ``node_hours``, and again the folded hours a late range re-rolled (``sql/hours.py``).

Rolling a range also adds to ``job_gpus`` the GPUs the agents attributed in it to jobs Slurm
gave no GPU map (:func:`gpuwatch.sql.jobs.attach_attributed_gpus`), so their hours are summed.

Rolling a range is "delete its rollup rows, insert them again from raw samples" in one
transaction, so it is idempotent: re-rolling twice, or a pass killed half-way, leaves
correct rows. Works on PostgreSQL and SQLite from the same statements, except for the
minute bucket expression.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from gpuwatch.clock import utcnow
from gpuwatch.sql import hours, job_hours, progress
from gpuwatch.sql.buckets import as_utc, epoch_seconds, minute_bucket
from gpuwatch.sql.folding import join_distinct
from gpuwatch.sql.gpu_readings import first_gpu_sample_at, gpu_samples_between
from gpuwatch.sql.jobs import attach_attributed_gpus
from gpuwatch.sql.readings import first_sample_at, samples_between
from gpuwatch.sql.schema import (
    UTIL_BINS,
    gpu_minutes,
    gpus,
    ingested_batches,
    job_minutes,
    node_minutes,
)

log = logging.getLogger(__name__)

MINUTE = timedelta(minutes=1)


def floor_minute(ts: datetime) -> datetime:
    return ts.astimezone(timezone.utc).replace(second=0, microsecond=0)


def xid_codes(text: str | None) -> tuple[int, ...]:
    """The distinct XID codes in a ``xid_codes`` rollup text (JSON lists joined), in order."""
    return tuple(sorted({int(code) for code in re.findall(r"\d+", text or "")}))


def framework_names(text: str | None) -> tuple[str, ...] | None:
    """The distinct framework names in a ``frameworks`` rollup text, in order; None for NULL
    (no sample inspected), () when every inspected process ran none."""
    if text is None:
        return None
    return tuple(sorted(set(re.findall(r'"([^"]+)"', text))))


def _count(column: sa.ColumnElement) -> sa.ColumnElement:
    return sa.func.count(column)


def _sum_n(name: str, expr: sa.ColumnElement) -> list[sa.ColumnElement]:
    """``<name>_sum`` and ``<name>_n``: what a mean over minutes is built from (nulls not counted)."""
    return [sa.func.sum(expr).label(f"{name}_sum"), _count(expr).label(f"{name}_n")]


def _sums_n(*columns: sa.Column) -> list[sa.ColumnElement]:
    """:func:`_sum_n` of each column under its own name."""
    return [part for column in columns for part in _sum_n(column.name, column)]


def _sum_if(condition: sa.ColumnElement) -> sa.ColumnElement:
    return sa.func.sum(sa.case((condition, 1), else_=0))


#: the total-energy counter's rise counts for a sample when the sample before it is at most
#: this many intervals back (an agent that was away: its gap's energy is not this minute's)
ENERGY_MAX_GAP_INTERVALS = 3
#: the sample before a chunk's first one is looked for this far back
_ENERGY_LOOKBACK = timedelta(minutes=1)


def _with_energy(conn: sa.Connection, start: datetime, end: datetime, node_id: int | None) -> Any:
    """The GPU samples in ``[start - lookback, end)`` with each sample's energy (joules) and
    whether it came from the power reading instead of the counter."""
    samples = gpu_samples_between(conn, start - _ENERGY_LOOKBACK, end, node_id=node_id)
    g = samples.c
    order = {"partition_by": (g.node_id, g.gpu_index), "order_by": g.ts}
    previous = sa.func.lag(g.energy_joules).over(**order)
    previous_ts = sa.func.lag(g.ts).over(**order)
    interval = sa.func.coalesce(g.interval_s, 10.0)
    rise = g.energy_joules - previous
    gap_s = epoch_seconds(conn, g.ts) - epoch_seconds(conn, previous_ts)
    from_counter = sa.and_(rise.is_not(None), rise >= 0, gap_s <= ENERGY_MAX_GAP_INTERVALS * interval)
    query = sa.select(
        samples,
        sa.case((from_counter, rise), else_=g.power_watts * interval).label("energy_j"),
        sa.case((from_counter, 0), (g.power_watts.is_not(None), 1), else_=0).label("energy_from_power"),
    )
    return query.subquery("gpu_samples_energy")


def _clock_ratio(g: Any) -> sa.ColumnElement:
    """SM clock over the card's max SM clock; NULL where either is unknown (or max is 0)."""
    has_max = sa.and_(g.sm_clock_max_hz.is_not(None), g.sm_clock_max_hz > 0)
    return sa.case((has_max, g.sm_clock_hz / g.sm_clock_max_hz), else_=None)


def _gpu_select(conn: sa.Connection, start: datetime, end: datetime, node_id: int | None) -> sa.Select:
    g = _with_energy(conn, start, end, node_id).c
    # a MIG instance has no NVML utilization (not supported): its GPM graphics-engine activity
    # is its utilization, in the sums, the histogram and everything read from them
    util = sa.func.coalesce(g.util_gpu_ratio, g.gr_engine_active_ratio)
    bins = [_sum_if(util == 0).label("util_bin_0")]
    bins += [
        _sum_if(sa.and_(util > (k - 1) / 10, util <= k / 10)).label(f"util_bin_{k}")
        for k in range(1, UTIL_BINS)
    ]
    not_idle_reasons = sa.and_(
        g.throttle_reasons.is_not(None),
        sa.cast(g.throttle_reasons, sa.Text).not_in(["[]", '["gpu_idle"]', "null"]),
    )
    xid_text = sa.cast(g.xid_errors, sa.Text)
    has_xid = sa.and_(g.xid_errors.is_not(None), xid_text.not_in(["[]", "null"]))
    # the power limiter and nothing else (gpu_idle aside): every quoted name gone once those two are
    reasons = sa.cast(g.throttle_reasons, sa.Text)
    others = sa.func.replace(sa.func.replace(reasons, '"gpu_idle"', ""), '"sw_power_cap"', "")
    power_capped_only = sa.and_(reasons.like('%"sw_power_cap"%'), others.not_like('%"%'))

    columns = [
        g.node_id,
        g.gpu_index,
        minute_bucket(conn, g.ts).label("minute"),
        sa.func.count().label("samples"),
        _sum_if(g.state == "lost").label("lost_samples"),
        *_sum_n("util_gpu_ratio", util),
        *_sum_n("util_gpu_idle_fraction_ratio", g.util_gpu_idle_fraction_ratio),
        *_sum_n("util_memory_ratio", g.util_memory_ratio),
        *_sum_n("sm_active_ratio", g.sm_active_ratio),
        *_sum_n("sm_occupancy_ratio", g.sm_occupancy_ratio),
        *_sum_n("tensor_active_ratio", g.tensor_active_ratio),
        *_sum_n("dram_active_ratio", g.dram_active_ratio),
        *_sum_n("fp32_active_ratio", g.fp32_active_ratio),
        *_sum_n("fp16_active_ratio", g.fp16_active_ratio),
        *_sum_n("power_watts", g.power_watts),
        *_sum_n("pcie_bytes_per_s", g.pcie_tx_bytes_per_s + g.pcie_rx_bytes_per_s),
        *_sum_n("nvlink_bytes_per_s", g.nvlink_tx_bytes_per_s + g.nvlink_rx_bytes_per_s),
        *_sum_n("fp64_active_ratio", g.fp64_active_ratio),
        *_sum_n("sm_clock_ratio", _clock_ratio(g)),
        sa.func.sum(util * util).label("util_gpu_ratio_sumsq"),
        sa.func.max(util).label("util_gpu_ratio_max"),
        *bins,
        sa.func.max(g.memory_used_bytes).label("memory_used_bytes_max"),
        sa.func.max(g.memory_total_bytes).label("memory_total_bytes"),
        sa.func.max(g.power_limit_watts).label("power_limit_watts"),
        sa.func.max(g.power_default_limit_watts).label("power_default_limit_watts"),
        sa.func.max(g.temperature_celsius).label("temperature_celsius_max"),
        _sum_if(not_idle_reasons).label("throttled_samples"),
        _sum_if(power_capped_only).label("power_capped_samples"),
        _sum_if(has_xid).label("xid_samples"),
        _sum_if(sa.or_(g.row_remap_pending, g.retired_pages_pending)).label("reset_pending_samples"),
        _sum_if(g.row_remap_failed).label("remap_failed_samples"),
        join_distinct(conn, sa.case((has_xid, sa.cast(g.xid_errors, sa.Text)), else_=None)).label(
            "xid_codes"
        ),
        join_distinct(conn, sa.case((g.frameworks.is_not(None), sa.cast(g.frameworks, sa.Text)))).label(
            "frameworks"
        ),
        (sa.func.max(sa.case((g.simulated, 1), else_=0)) > 0).label("simulated"),
        sa.func.sum(g.energy_j).label("energy_joules"),
        sa.func.sum(g.energy_from_power).label("energy_power_samples"),
    ]
    query = sa.select(*columns).where(g.ts >= start)
    return query.group_by(g.node_id, g.gpu_index, sa.text("3"))


def _job_select(conn: sa.Connection, start: datetime, end: datetime, node_id: int | None) -> sa.Select:
    j = samples_between(conn, "job", start, end, node_id=node_id).c
    query = sa.select(
        j.node_id,
        j.job_id,
        minute_bucket(conn, j.ts).label("minute"),
        sa.func.count().label("samples"),
        *_sums_n(j.cpu_used_cores, j.memory_pressure_ratio),
        sa.func.max(j.cpu_allocated_cores).label("cpu_allocated_cores"),
        sa.func.max(j.memory_used_bytes).label("memory_used_bytes_max"),
        sa.func.max(j.memory_cache_bytes).label("memory_cache_bytes_max"),
        sa.func.max(j.memory_used_bytes - sa.func.coalesce(j.memory_cache_bytes, 0)).label(
            "memory_anon_bytes_max"
        ),
        sa.func.max(j.memory_limit_bytes).label("memory_limit_bytes"),
        sa.func.max(j.memory_swap_bytes).label("memory_swap_bytes_max"),
    )
    return query.group_by(j.node_id, j.job_id, sa.text("3"))


#: node_minutes columns whose value for a node-minute with no such samples is not NULL
_NODE_DEFAULTS = {"gpus_reporting": 0, "gpu_simulated": False}


def _node_rows(conn: sa.Connection, start: datetime, end: datetime, node_id: int | None) -> list[dict]:
    """node_minutes rows, merged in Python from small grouped queries (one row per node-minute,
    so this is cheap, and it avoids a FULL OUTER JOIN that SQLite < 3.39 lacks). The GPU columns
    are summed from the ``gpu_minutes`` rows of the same range, so those are rolled first."""
    rows: dict[tuple[int, datetime], dict] = defaultdict(dict)

    def merge(query: sa.Select, node: sa.ColumnElement) -> None:
        if node_id is not None:
            query = query.where(node == node_id)
        for r in conn.execute(query.group_by(node, sa.text("2"))).mappings():
            rows[(r["node_id"], as_utc(conn, r["minute"]))].update(
                {k: v for k, v in r.items() if k not in ("node_id", "minute")}
            )

    def grouped(kind: str, columns: Callable[[Any], list[sa.ColumnElement]]) -> None:
        """The ``kind`` readings of the range (``node_id`` already applied) grouped per minute."""
        t = samples_between(conn, kind, start, end, node_id=node_id).c
        merge(sa.select(t.node_id, minute_bucket(conn, t.ts).label("minute"), *columns(t)), t.node_id)

    g = gpu_minutes.c
    grouped(
        "cpu",
        lambda c: [
            *_sums_n(c.busy_ratio, c.iowait_ratio),
            sa.func.max(c.threads_per_core).label("threads_per_core"),
        ],
    )
    grouped(
        "memory",
        lambda m: [
            *_sums_n(m.swap_in_bytes_per_s, m.swap_out_bytes_per_s),
            sa.func.min(m.available_bytes).label("available_bytes_min"),
            sa.func.max(m.total_bytes).label("total_bytes"),
        ],
    )
    # network: the node's total over its devices; n counts sample times, so sum/n = mean total rate
    for kind, name in (("nic", "nic_bytes_per_s"), ("infiniband", "ib_bytes_per_s")):
        grouped(
            kind,
            lambda t, name=name: [
                sa.func.sum(t.rx_bytes_per_s + t.tx_bytes_per_s).label(f"{name}_sum"),
                sa.func.count(sa.distinct(t.ts)).label(f"{name}_n"),
            ],
        )
    # whole cards (and cards in MIG mode, taken out again below): every GPU not a MIG instance
    whole = sa.and_(g.node_id == gpus.c.node_id, g.gpu_index == gpus.c.gpu_index)
    merge(
        sa.select(
            g.node_id,
            g.minute,
            sa.func.sum(g.util_gpu_ratio_sum).label("gpu_util_ratio_sum"),
            sa.func.sum(g.util_gpu_ratio_n).label("gpu_util_ratio_n"),
            _sum_if(g.util_gpu_ratio_n > 0).label("gpus_reporting"),
            (sa.func.max(sa.case((g.simulated, 1), else_=0)) > 0).label("gpu_simulated"),
        )
        .select_from(gpu_minutes.outerjoin(gpus, whole))
        .where(g.minute >= start, g.minute < end, gpus.c.parent_gpu_index.is_(None)),
        g.node_id,
    )
    _fold_mig_cards(conn, rows, start, end, node_id)
    out = []
    for (nid, minute), values in rows.items():
        row = {"node_id": nid, "minute": minute}
        for col in node_minutes.c:
            if col.name not in row:
                default = _NODE_DEFAULTS.get(col.name, 0 if col.name.endswith("_n") else None)
                row[col.name] = values.get(col.name, default)
        row["gpu_simulated"] = bool(row["gpu_simulated"])
        out.append(row)
    return out


def _fold_mig_cards(
    conn: sa.Connection,
    rows: dict[tuple[int, datetime], dict],
    start: datetime,
    end: datetime,
    node_id: int | None,
) -> None:
    """Count a card split into MIG instances once in its node-minute's GPU columns.

    Such a card is in ``gpu_minutes`` under its own index (power, temperature; any card-wide
    activity its GPM gives) and so is each of its instances. In a minute where one of its
    instances has a row, the card's own utilization is taken out of the node's sums and the
    card counts as one GPU whose utilization is its instances' activity weighted by their
    share of it (``card_fraction_ratio``; slots no instance fills count idle), over as many
    samples as its best-sampled instance had. Only MIG nodes have such rows, so this reads
    few of them.
    """
    g, card, inst = gpu_minutes.c, gpus.alias("card"), gpus.alias("inst")
    in_range = [g.minute >= start, g.minute < end]
    if node_id is not None:
        in_range.append(g.node_id == node_id)
    instances = conn.execute(
        sa.select(
            g.node_id,
            g.minute,
            inst.c.parent_gpu_index,
            inst.c.card_fraction_ratio,
            g.util_gpu_ratio_sum,
            g.util_gpu_ratio_n,
        )
        .select_from(
            gpu_minutes.join(inst, sa.and_(inst.c.node_id == g.node_id, inst.c.gpu_index == g.gpu_index))
        )
        .where(*in_range, inst.c.parent_gpu_index.is_not(None))
    ).all()
    if not instances:
        return
    # (node, minute, card) -> [weighted activity, samples, instances with a signal]
    split: dict[tuple[int, datetime, int], list[float]] = {}
    for nid, minute, parent, fraction, util_sum, util_n in instances:
        acc = split.setdefault((nid, as_utc(conn, minute), int(parent)), [0.0, 0.0, 0.0])
        if util_n and util_sum is not None:
            weight = 1.0 if fraction is None else float(fraction)
            acc[0] += weight * float(util_sum) / float(util_n)
            acc[1] = max(acc[1], float(util_n))
            acc[2] += 1
    is_card = sa.exists().where(inst.c.node_id == g.node_id, inst.c.parent_gpu_index == g.gpu_index)
    cards = conn.execute(
        sa.select(g.node_id, g.minute, g.gpu_index, g.util_gpu_ratio_sum, g.util_gpu_ratio_n)
        .select_from(
            gpu_minutes.join(card, sa.and_(card.c.node_id == g.node_id, card.c.gpu_index == g.gpu_index))
        )
        .where(*in_range, card.c.parent_gpu_index.is_(None), is_card)
    ).all()
    for nid, minute, index, util_sum, util_n in cards:  # the card's own reading leaves the sums
        minute = as_utc(conn, minute)
        if (nid, minute, int(index)) in split and util_n:
            row = rows[(nid, minute)]
            row["gpu_util_ratio_sum"] = (row.get("gpu_util_ratio_sum") or 0.0) - float(util_sum or 0.0)
            row["gpu_util_ratio_n"] = int(row.get("gpu_util_ratio_n") or 0) - int(util_n)
            row["gpus_reporting"] = int(row.get("gpus_reporting") or 0) - 1
    for (nid, minute, _card), (activity, samples, signals) in split.items():
        if not signals:
            continue
        row = rows[(nid, minute)]
        row["gpu_util_ratio_sum"] = (row.get("gpu_util_ratio_sum") or 0.0) + activity * samples
        row["gpu_util_ratio_n"] = int(row.get("gpu_util_ratio_n") or 0) + int(samples)
        row["gpus_reporting"] = int(row.get("gpus_reporting") or 0) + 1
    for row in rows.values():
        if row.get("gpu_util_ratio_n") == 0:
            row["gpu_util_ratio_sum"] = None


def roll_minutes(conn: sa.Connection, start: datetime, end: datetime, node_id: int | None = None) -> None:
    """(Re)build the per-minute rollup rows of ``[start, end)`` (whole minutes), for one node or
    all, in the caller's transaction."""
    start, end = floor_minute(start), floor_minute(end)
    if end <= start:
        return
    for table in (gpu_minutes, job_minutes, node_minutes):
        delete = table.delete().where(table.c.minute >= start, table.c.minute < end)
        if node_id is not None:
            delete = delete.where(table.c.node_id == node_id)
        conn.execute(delete)
    gpu_q = _gpu_select(conn, start, end, node_id)
    conn.execute(gpu_minutes.insert().from_select([c.name for c in gpu_q.selected_columns], gpu_q))
    job_q = _job_select(conn, start, end, node_id)
    conn.execute(job_minutes.insert().from_select([c.name for c in job_q.selected_columns], job_q))
    node_rows = _node_rows(conn, start, end, node_id)
    if node_rows:
        conn.execute(node_minutes.insert(), node_rows)
    attach_attributed_gpus(conn, start, end, node_id)


@dataclass
class RollupReport:
    minutes_rolled: int = 0
    late_ranges: int = 0
    done_until: datetime | None = None
    late_too_old: int = 0
    job_hours: int = 0  # job-hours (re)summed (sql/job_hours.py)
    hours_folded: int = 0  # hours (re)folded into gpu_hours and node_hours (sql/hours.py)


class Rollup:
    """The rollup pass; one instance per daemon (the scheduler runs it every minute)."""

    def __init__(
        self,
        engine: sa.Engine,
        lag: timedelta = timedelta(minutes=2),
        chunk_minutes: int = 60,
        raw_days: int | None = None,
    ) -> None:
        self.engine = engine
        self.lag = lag
        self.chunk = timedelta(minutes=chunk_minutes)
        #: late ranges are re-rolled only from ``now - raw_days`` on (None: no retention)
        self.raw_days = raw_days

    # ----------------------------------------------------------------- rolling a range
    def roll(self, start: datetime, end: datetime, node_id: int | None = None) -> None:
        """(Re)build the rollup rows of ``[start, end)`` (whole minutes), for one node or all."""
        with self.engine.begin() as conn:
            roll_minutes(conn, start, end, node_id)

    def reroll(self, start: datetime, end: datetime, node_id: int) -> tuple[int, int]:
        """A late batch's range rolled again with the job-hours and hours it touches, in one
        transaction, so no reader sees fresh minutes beside a stale hour; (job-hours, hours)
        rewritten."""
        with self.engine.begin() as conn:
            roll_minutes(conn, start, end, node_id)
            return job_hours.resum(conn, start, end), hours.refold(conn, start, end, node_id)

    # ----------------------------------------------------------------- the pass
    def run_once(self, now: datetime | None = None) -> RollupReport:
        now = now or utcnow()
        report = RollupReport()
        pass_started = utcnow()
        with self.engine.connect() as conn:
            done_until = progress.done_until(conn, "minutes")
            late_scan = progress.done_until(conn, "late_scan")
            if done_until is None:
                first = first_gpu_sample_at(conn)
                first_job = first_sample_at(conn, "job")
                candidates = [t for t in (first, first_job) if t is not None]
                done_until = floor_minute(min(candidates)) if candidates else floor_minute(now - self.lag)
        target = floor_minute(now - self.lag)

        # 1. late batches: samples older than the edge we had already rolled
        if late_scan is not None:
            since = late_scan - timedelta(seconds=60)  # a batch committed just after the last scan began
            with self.engine.connect() as conn:
                late = conn.execute(
                    sa.select(
                        ingested_batches.c.node_id,
                        sa.func.min(ingested_batches.c.min_ts),
                        sa.func.max(ingested_batches.c.max_ts),
                    )
                    .where(ingested_batches.c.received_at >= since, ingested_batches.c.min_ts < done_until)
                    .group_by(ingested_batches.c.node_id)
                ).all()
            horizon = floor_minute(now - timedelta(days=self.raw_days)) if self.raw_days else None
            for node_id, lo, hi in late:
                start, end = floor_minute(lo), min(floor_minute(hi) + MINUTE, done_until)
                if horizon is not None and start < horizon:
                    report.late_too_old += 1
                    log.warning(
                        "rollup: node %d sent samples from %s, older than the raw horizon %s "
                        "(retention.raw_days); stored raw, rollups before the horizon left as they were",
                        node_id,
                        start.isoformat(),
                        horizon.isoformat(),
                    )
                    start = horizon
                if start < end:
                    summed, folded = self.reroll(start, end, node_id)
                    report.job_hours += summed
                    report.hours_folded += folded
                    report.late_ranges += 1

        # 2. new whole minutes
        cursor = done_until
        while cursor < target:
            chunk_end = min(cursor + self.chunk, target)
            self.roll(cursor, chunk_end)
            report.minutes_rolled += int((chunk_end - cursor) / MINUTE)
            cursor = chunk_end
            with self.engine.begin() as conn:
                progress.set_done_until(conn, "minutes", cursor)
        with self.engine.begin() as conn:
            progress.set_done_until(conn, "minutes", cursor)
            progress.set_done_until(conn, "late_scan", pass_started)
        # 3. hours now complete and settled: each job's sums per hour, for reports
        with self.engine.begin() as conn:
            report.job_hours += job_hours.advance(conn, cursor)
        # 4. hours now complete: folded into the hourly tables (sql/hours.py)
        with self.engine.begin() as conn:
            report.hours_folded += hours.advance(conn, cursor)
        report.done_until = cursor
        if report.minutes_rolled or report.late_ranges:
            log.info(
                "rollup: %d minute(s) rolled, %d late range(s) re-rolled, done until %s",
                report.minutes_rolled,
                report.late_ranges,
                cursor.isoformat(),
            )
        return report
