"""Bytes on disk per GPU-sample (PostgreSQL), measured at small scale and extrapolated.

    .venv/bin/python bench/storage.py [--nodes 20] [--gpus 8] [--hours 1] \
        [--target-nodes 1000] [--raw-days 14] [--minute-days 14] [--rollup-days 400] \
        [--process-days N] [--bundle N] [--realistic] [--json]

Makes a throwaway database on the server at 127.0.0.1:5432 (or $GPUWATCH_BENCH_PG), stores
``hours`` of 10 s cycles of ``nodes`` nodes (each cycle: ``gpus`` GPU samples with 2
processes each + the host samples of ``tests/factories.py``: cpu, memory, nic, infiniband,
disk, one job, one attribution, agent), rolls them up per minute, folds the hours they touch
into the hourly rollups, VACUUM ANALYZEs, and reads ``pg_total_relation_size`` (heap + indexes
+ TOAST) of every daily partition of each sample table and of the rollup tables (the hours
folded are copied to :data:`HOUR_COPIES` times as many later hours first: a few hundred rows
would be mostly pages' and indexes' fixed overhead).
Prints bytes per row and extrapolates to ``target-nodes`` x ``gpus`` GPUs in the retention
tiers: raw samples kept ``raw-days``, per-minute rollups ``minute-days``, hourly rollups
``rollup-days``; and, for comparison, per-minute rollups kept ``rollup-days`` (before the hourly
tier). With ``--process-days`` also what ``retention.process_days`` (per-process rows kept
shorter) saves.
Each node's batches are stored as the daemon stores agents' pushes at the default config: the
``agent.push_every`` (18) consecutive cycles of every node per group, so a node's samples of
one group share one pack per table and hour; ``--bundle N`` stores N cycles per group instead
(``--bundle 1``: a push per cycle, the costliest layout).
``--realistic`` gives the GPUs moving values (``bench/realistic.py``) instead of the same ones
every cycle, which compress far better than a GPU's readings. ``--json`` prints one object
instead: ``raw_bytes_per_gpu_sample`` (every sample table and the process packs, per GPU-sample),
``rollup_bytes_per_gpu_minute`` (``gpu_minutes``), ``rollup_bytes_per_gpu_hour``
(``gpu_hours``), ``total_bytes`` (the extrapolation's total, in tiers), ``raw_bytes``,
``minute_bytes``, ``hour_bytes``, ``rollup_bytes`` (the two together), ``tiers`` (days and bytes
per tier and table), ``total_bytes_minutes_only`` (minutes kept ``rollup-days``), per-table
``tables`` and the parameters.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import _cycle, drop_db, fresh_db
from bench.realistic import Realistic
from gpuwatch import wire
from gpuwatch.clock import utcnow
from gpuwatch.config.settings import AgentConfig, RetentionConfig
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql import hours
from gpuwatch.sql.buckets import floor_hour
from gpuwatch.sql.gpu_readings import count_gpu_samples
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.partitions import list_partitions
from gpuwatch.sql.rollups import Rollup, floor_minute
from gpuwatch.sql.schema import HOUR_TABLES, PARTITIONED_TABLES, ROLLUP_TABLES

INTERVAL_S = 10
#: the folded hours are measured as this many copies (at later hours), as a table of many rows
HOUR_COPIES = 30


def _replicate_hours(conn: sa.Connection, start: datetime, span: timedelta) -> None:
    """Copy the hourly rows of ``[start, start + span)`` ``HOUR_COPIES - 1`` times, each copy
    ``span`` after the one before."""
    for table in HOUR_TABLES:
        names = [c.name for c in table.c]
        folded = (table.c.hour >= start, table.c.hour < start + span)
        for k in range(1, HOUR_COPIES):
            later = sa.literal(span * k, sa.Interval)
            shifted = [(c + later).label("hour") if c.name == "hour" else c for c in table.c]
            conn.execute(table.insert().from_select(names, sa.select(*shifted).where(*folded)))


def table_bytes(conn: sa.Connection, table: str, partitioned: bool) -> tuple[int, int]:
    """(bytes incl. indexes and TOAST, rows) of a table, summed over its partitions."""
    names = list_partitions(conn, table) if partitioned else [table]
    size = rows = 0
    for name in names:
        size += conn.execute(
            sa.text("SELECT pg_total_relation_size(CAST(:n AS regclass))"), {"n": name}
        ).scalar()
        rows += conn.execute(sa.text(f'SELECT count(*) FROM "{name}"')).scalar()
    return size, rows


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--target-nodes", type=int, default=1000)
    ap.add_argument("--raw-days", type=int, default=14)
    ap.add_argument("--minute-days", type=int, default=RetentionConfig().minute_days)
    ap.add_argument("--rollup-days", type=int, default=RetentionConfig().rollup_days)
    ap.add_argument(
        "--process-days", type=int, default=None, help="also extrapolate retention.process_days = N"
    )
    ap.add_argument(
        "--bundle",
        type=int,
        default=AgentConfig().push_every,
        help="cycles of every node stored per group (default: agent.push_every's default)",
    )
    ap.add_argument("--realistic", action="store_true", help="GPU values that move (bench/realistic.py)")
    ap.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    args = ap.parse_args()
    moving = Realistic() if args.realistic else None
    cycles = int(args.hours * 3600 / INTERVAL_S)
    start = floor_minute(utcnow() - timedelta(hours=args.hours, minutes=5))
    name, _url, engine = fresh_db()
    try:
        store = BatchStore(engine)
        ids = {}
        for n in range(args.nodes):
            node = f"st{n:04d}"
            create_token(engine, node)
            with engine.connect() as conn:
                ids[node] = get_node(conn, node).id
        end = start + timedelta(seconds=INTERVAL_S * cycles)
        store.partitions.ensure_days({start.date(), end.date()})
        t0 = time.perf_counter()
        for c0 in range(0, cycles, args.bundle):  # one group commit per cycle (or bundle) of all nodes
            group = []
            for node in ids:
                for c in range(c0, min(c0 + args.bundle, cycles)):
                    samples = _cycle(start + timedelta(seconds=INTERVAL_S * c), args.gpus)
                    if moving is not None:
                        samples = moving.samples(node, samples)
                    group.append(
                        (ids[node], wire.Batch(node=node, agent_version="bench", seq=c, samples=samples))
                    )
            store.store_many(group)
        stored_s = time.perf_counter() - t0
        Rollup(engine).roll(start, end + timedelta(minutes=1))
        with engine.begin() as conn:
            first, stop = floor_hour(start), floor_hour(end) + timedelta(hours=1)
            hours.fold(conn, first, stop)
            _replicate_hours(conn, first, stop - first)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE"))
        with engine.connect() as conn:
            raw = {t.name: table_bytes(conn, t.name, True) for t in PARTITIONED_TABLES}
            gpu_rows = count_gpu_samples(conn)
            roll = {t.name: table_bytes(conn, t.name, False) for t in ROLLUP_TABLES}
            hourly = {t.name: table_bytes(conn, t.name, False) for t in HOUR_TABLES}
    finally:
        engine.dispose()
        drop_db(name)

    raw_total = sum(s for s, _ in raw.values())
    # extrapolation: rows scale with GPUs (gpu tables, gpu_minutes) or nodes (host tables, node_minutes)
    gpus = args.target_nodes * args.gpus
    per_day = 86400 / INTERVAL_S
    gpu_samples_day = gpus * per_day
    raw_bytes = raw_total / gpu_rows * gpu_samples_day * args.raw_days  # host rows scale with nodes too
    measured_minutes = roll["gpu_minutes"][1] / (args.nodes * args.gpus) or 1
    per_node = args.target_nodes / args.nodes

    def minute_tier(days: int) -> dict[str, float]:
        return {t: size * per_node * (days * 1440 / measured_minutes) for t, (size, _) in roll.items()}

    # an hourly table's rows: a row per GPU (or node) and hour, bytes per row from the hours folded here
    hour_row = {t: size / rows if rows else 0.0 for t, (size, rows) in hourly.items()}
    keys = {"gpu_hours": gpus, "node_hours": args.target_nodes}
    hour_bytes = {t: hour_row[t] * keys[t] * 24 * args.rollup_days for t in hourly}
    minute_bytes = minute_tier(args.minute_days)
    minutes_only = minute_tier(args.rollup_days)
    total = raw_bytes + sum(minute_bytes.values()) + sum(hour_bytes.values())
    total_minutes_only = raw_bytes + sum(minutes_only.values())
    if args.json:
        size, rows = roll["gpu_minutes"]
        tiers = {
            "raw": {"days": args.raw_days, "bytes": round(raw_bytes)},
            "minutes": {"days": args.minute_days, "bytes": {t: round(b) for t, b in minute_bytes.items()}},
            "hours": {"days": args.rollup_days, "bytes": {t: round(b) for t, b in hour_bytes.items()}},
        }
        figures = {
            "raw_bytes_per_gpu_sample": round(raw_total / gpu_rows, 1),
            "rollup_bytes_per_gpu_minute": round(size / rows, 1) if rows else None,
            "rollup_bytes_per_gpu_hour": round(hour_row["gpu_hours"], 1),
            "total_bytes": round(total),
            "raw_bytes": round(raw_bytes),
            "minute_bytes": round(sum(minute_bytes.values())),
            "hour_bytes": round(sum(hour_bytes.values())),
            "rollup_bytes": round(sum(minute_bytes.values()) + sum(hour_bytes.values())),
            "total_bytes_minutes_only": round(total_minutes_only),
            "tiers": tiers,
            "tables": {t: {"bytes": b, "rows": r} for t, (b, r) in {**raw, **roll, **hourly}.items()},
            "gpu_samples": gpu_rows,
            **{k: getattr(args, k) for k in ("nodes", "gpus", "hours", "bundle", "realistic")},
            **{k: getattr(args, k) for k in ("target_nodes", "raw_days", "minute_days", "rollup_days")},
        }
        print(json.dumps(figures, indent=2))
        return
    print(
        f"measured: {args.nodes} nodes x {args.gpus} GPUs x {args.hours:g} h at {INTERVAL_S} s = "
        f"{cycles} cycles, {gpu_rows:,} GPU-samples, stored in {stored_s:.1f} s"
        + (" (GPU values moving: --realistic)" if args.realistic else "")
    )
    print(f"{'table':<24}{'rows':>12}{'bytes':>14}{'B/row':>9}{'B/GPU-sample':>14}")
    for label, sizes in (("raw", raw), ("rollup", roll), ("hourly", hourly)):
        for table, (size, rows) in sizes.items():
            per_row = size / rows if rows else 0
            print(
                f"{table:<24}{rows:>12,}{human(size):>14}{per_row:>9.0f}{size / gpu_rows:>14.1f}  ({label})"
            )
    gpu_only = raw["gpu_sample_packs"][0] + raw["gpu_process_packs"][0]
    print(
        f"raw, all sample tables: {raw_total / gpu_rows:,.0f} B per GPU-sample "
        f"(GPU samples + processes alone: {gpu_only / gpu_rows:,.0f} B)"
    )
    print(f"\nextrapolated to {args.target_nodes:,} nodes x {args.gpus} GPUs ({gpus:,} GPUs), 10 s samples:")
    print(f"  GPU-samples per day: {gpu_samples_day:,.0f}; raw per day: {human(raw_bytes / args.raw_days)}")
    print(f"  raw kept {args.raw_days} days: {human(raw_bytes)}")
    for t, b in minute_bytes.items():
        print(f"  {t} kept {args.minute_days} days: {human(b)}")
    for t, b in hour_bytes.items():
        print(f"  {t} kept {args.rollup_days} days: {human(b)} ({hour_row[t]:,.0f} B per row)")
    print(
        f"  total: {human(total)} (raw {human(raw_bytes)} + minutes {human(sum(minute_bytes.values()))} "
        f"+ hours {human(sum(hour_bytes.values()))})"
    )
    print(
        f"  before the hourly tier (minutes kept {args.rollup_days} days): {human(total_minutes_only)} "
        f"(rollups {human(sum(minutes_only.values()))})"
    )
    if args.process_days is not None:
        per_day_process = raw["gpu_process_packs"][0] / gpu_rows * gpu_samples_day
        saved = per_day_process * max(args.raw_days - args.process_days, 0)
        print(
            f"  with retention.process_days = {args.process_days}: raw {human(raw_bytes - saved)} "
            f"({saved / raw_bytes:.0%} less), total {human(total - saved)}"
        )


if __name__ == "__main__":
    main()
