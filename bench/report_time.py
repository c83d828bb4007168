"""Seconds for ``gpuwatch report`` over a period of a cluster's rollups (PostgreSQL).

    .venv/bin/python bench/report_time.py [--nodes 50] [--gpus 8] [--days 7] [--verdict-every-min 10]

Makes a throwaway database (as ``bench/ingest.py``: 127.0.0.1:5432 or $GPUWATCH_BENCH_PG) and
fills it in SQL (``generate_series``): each node runs one 8-GPU job a day, back to back, for
``days`` days; every GPU has a ``gpu_minutes`` row per minute (utilization, energy), every job a
``job_minutes`` row per node-minute (CPU, memory), a recent-window verdict every
``verdict_every_min`` minutes and a whole-job verdict at its end; 200 users in 20 accounts.
Sums the job-hours as the rollup pass does (and prints what that costs per hour). Then times
:func:`gpuwatch.views.usage_report` by user and by account over the whole span
(``repeat`` times, after one warm-up) and its parts, and prints the median and the seconds per
1,000 node-days, from which a month of a 1,000-node cluster (30,000 node-days) is extrapolated
linearly: job-hours, verdicts and jobs grow with node-days; the minutes read at a period's
edges grow with nodes only, so the extrapolation overstates them for long periods.

Before timing, the ended jobs' totals are stored as the daemon's totals pass stores them
(``views/job_totals.py``; the cost per job is printed), so a period that holds a whole job sums
its stored row; ``--no-totals`` deletes them instead (the baseline: every job from its hours
and verdicts). Jobs that ended in the last hour have none (their hours are not all summed).

"usage_report as --since runs it" is a period from the hour to 30 minutes before the data's end;
``--ends-now`` first deletes the minutes and verdicts after that (for good), so the report sees
what one that ends now sees: nothing after its end (the verdicts of its last hour are then read
whole from ``verdict_hours``, ``views/waste.py``).

``--hours-only`` measures a month of a large cluster itself instead of extrapolating: it fills
what the report reads for whole hours as the rollup pass and the triggers on ``verdicts`` leave
it (``job_hours``; ``verdict_hours``, a recent-window pick per job-hour and each job's
whole-job verdict through the triggers), and minutes and recent verdicts in the first and last
hour only (what a period 30 minutes past the hours reads raw). E.g. ``--nodes 1000 --days 30
--hours-only``: 30,000 jobs, 720,000 job-hours, as many verdict-hours.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import drop_db, fresh_db
from gpuwatch.clock import utcnow
from gpuwatch.sql import job_hours
from gpuwatch.sql.buckets import as_utc
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.nodes import create_token
from gpuwatch.sql.rollups import floor_minute
from gpuwatch.views import GroupBy, report_period, usage_report, waste_in_period
from gpuwatch.views.job_totals import store_job_totals
from gpuwatch.views.period import jobs_in_period

#: a month of a 1,000-node cluster
MONTH_NODE_DAYS = 1000 * 30

FILL = [
    """INSERT INTO slurm_jobs (job_id, source, name, user_name, account, partition, state, start_at, end_at,
                               gpus, cpus, memory_bytes, first_seen_at, updated_at)
       SELECT n.name || '-' || d, 'bench', 'train', 'u' || (n.id % 200), 'a' || (n.id % 20), 'gpu',
              'COMPLETED', :start + d * interval '1 day', :start + (d + 1) * interval '1 day', 8, 64,
              512 * 2^30, :start, :start
       FROM nodes n, generate_series(0, :days - 1) d WHERE n.name LIKE 'bench%'""",
    """INSERT INTO job_gpus (job_id, node, gpu_index)
       SELECT j.job_id, n.name, g
       FROM slurm_jobs j JOIN nodes n ON j.job_id LIKE n.name || '-%', generate_series(0, :gpus - 1) g""",
    """INSERT INTO gpu_minutes (node_id, gpu_index, minute, samples, lost_samples, util_gpu_ratio_sum,
                                util_gpu_ratio_n, energy_joules, energy_power_samples)
       SELECT n.id, g, m, 6, 0, 6 * random(), 6, 24000 + 1000 * random(), 0
       FROM nodes n, generate_series(0, :gpus - 1) g,
            generate_series(:start, :end - interval '1 minute', interval '1 minute') m
       WHERE n.name LIKE 'bench%'""",
    """INSERT INTO job_minutes (node_id, job_id, minute, samples, cpu_used_cores_sum, cpu_used_cores_n,
                                cpu_allocated_cores, memory_used_bytes_max, memory_limit_bytes)
       SELECT n.id, n.name || '-' || (extract(epoch FROM m - :start)::bigint / 86400), m, 6,
              6 * 64 * random(), 6, 64, (100 * 2^30 * random())::bigint, 512 * 2^30
       FROM nodes n, generate_series(:start, :end - interval '1 minute', interval '1 minute') m
       WHERE n.name LIKE 'bench%'""",
    """INSERT INTO verdicts (job_id, evaluated_at, window_kind, window_start, window_end, cause, confidence,
                             gpus, gpu_hours, gpu_hours_wasted, mean_util_ratio, summary, fix, evidence,
                             rules_version)
       SELECT j.job_id, t, 'recent', t - interval '10 minutes', t, 'input_bound', 0.8, 8, 8 / 6.0,
              8 / 6.0 * random(), 0.5, 's', 'f', '{}', 'bench'
       FROM slurm_jobs j,
            generate_series(j.start_at + :every * interval '1 minute', j.end_at,
                            :every * interval '1 minute') t""",
    """INSERT INTO verdicts (job_id, evaluated_at, window_kind, window_start, window_end, cause, confidence,
                             gpus, gpu_hours, gpu_hours_wasted, mean_util_ratio, summary, fix, evidence,
                             rules_version)
       SELECT j.job_id, j.end_at, 'job', j.start_at, j.end_at, 'input_bound', 0.8, 8, 192, 192 * random(),
              0.5, 's', 'f', '{}', 'bench'
       FROM slurm_jobs j""",
]


#: ``--hours-only``: whole hours as the rollup pass and the triggers leave them; minutes and
#: recent verdicts in the first and last hour (``:edge``) only
HOURS = [
    FILL[0],
    FILL[1],
    FILL[2].replace(
        "WHERE n.name LIKE 'bench%'",
        "WHERE n.name LIKE 'bench%' AND (m < :start + :edge OR m >= :end - :edge)",
    ),
    FILL[3].replace(
        "WHERE n.name LIKE 'bench%'",
        "WHERE n.name LIKE 'bench%' AND (m < :start + :edge OR m >= :end - :edge)",
    ),
    """INSERT INTO job_hours (job_id, hour, gpu_minutes, util_gpu_ratio_sum, util_gpu_ratio_n, energy_joules,
                             energy_power_samples, energy_samples, cpu_used_cores, cpu_allocated_cores,
                             memory_used_bytes_max, memory_limit_bytes)
       SELECT j.job_id, h, 60 * :gpus, 360 * :gpus * random(), 360 * :gpus, 60 * :gpus * 24500.0, 0,
              360 * :gpus,
              60 * 64 * random(), 60 * 64, (100 * 2^30 * random())::bigint, 512 * 2^30
       FROM slurm_jobs j, generate_series(j.start_at, j.end_at - interval '1 hour', interval '1 hour') h""",
    """INSERT INTO rollup_state (name, done_until) VALUES ('job_hours', :end)""",
    """INSERT INTO verdict_hours (job_id, hour, cause, recent_id, recent_wasted)
       SELECT j.job_id, h, 'input_bound', 0, 8 / 6.0 * random()
       FROM slurm_jobs j, generate_series(j.start_at, j.end_at - interval '1 hour', interval '1 hour') h
       WHERE h >= :start + :edge AND h < :end - :edge""",
    FILL[4] + " WHERE t < :start + :edge OR t >= :end - :edge",
    FILL[5],
]


def timed(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up: the first read pulls pages from disk into the cache
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def sum_job_hours(engine: sa.Engine, end: datetime, days: int, nodes: int) -> None:
    """What the rollup pass does once an hour, for every hour, and what that costs."""
    t0 = time.perf_counter()
    with engine.begin() as conn:
        written = job_hours.advance(conn, end + job_hours.SETTLE)
    took = time.perf_counter() - t0
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE job_hours"))
    per_hour = took / (24 * days)
    at_scale = per_hour * 1000 / nodes
    print(
        f"job_hours: {written:,} job-hours summed in {took:.1f} s, {per_hour:.3f} s per hour of "
        f"{nodes} nodes (the rollup pass's hourly cost; ~{at_scale:.1f} s at 1,000 nodes)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--verdict-every-min", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--hours-only", action="store_true", help="whole hours summed already; minutes at the edges"
    )
    ap.add_argument(
        "--db", help="time the report on this database (one this bench kept) instead of a new one"
    )
    ap.add_argument("--keep", action="store_true", help="keep the generated database (its URL is printed)")
    ap.add_argument("--profile", action="store_true", help="also print cProfile's top of one report by user")
    ap.add_argument(
        "--ends-now",
        action="store_true",
        help="first delete the minutes and verdicts from 30 minutes before the end on (changes the "
        "database): what a report that ends now sees, nothing after its end",
    )
    ap.add_argument(
        "--no-totals",
        action="store_true",
        help="delete the stored job totals first: every job read from its hours and verdicts",
    )
    args = ap.parse_args()
    if args.db:
        name, engine = None, create_engine(args.db)
        with engine.connect() as conn:
            start, end = (
                as_utc(conn, t)
                for t in conn.execute(sa.text("SELECT min(start_at), max(end_at) FROM slurm_jobs")).one()
            )
            args.nodes = conn.execute(sa.text("SELECT count(*) FROM nodes")).scalar_one()
        args.days = round((end - start) / timedelta(days=1))
    else:
        name, url, engine = fresh_db()
        start, end = fill(engine, args)
        if args.keep:
            print(f"kept: --db {url}")
    try:
        if args.ends_now:
            cut_at_now(engine, end - timedelta(minutes=30))
        if args.no_totals:
            with engine.begin() as conn:
                conn.execute(sa.text("DELETE FROM job_totals"))
            print("job totals: none (deleted); every job is read from its hours and verdicts")
        else:
            store_totals(engine)
        parts = {
            "usage_report by user": lambda: usage_report(engine, GroupBy.USER, start, end),
            "usage_report, 30 min past the hours": lambda: usage_report(
                engine, GroupBy.USER, start + timedelta(minutes=30), end - timedelta(minutes=30)
            ),
            # what `gpuwatch report --since` asks for when it runs at half past: the period starts
            # on the hour (views.report_period), its end is inside the current hour
            "usage_report as --since runs it": lambda: usage_report(
                engine,
                GroupBy.USER,
                *report_period(end - start - timedelta(hours=1), end - timedelta(minutes=30)),
            ),
            "usage_report by account": lambda: usage_report(engine, GroupBy.ACCOUNT, start, end),
            "  jobs_in_period (job-hours, minutes)": lambda: jobs_in_period(engine, start, end),
            "  waste_in_period (verdicts)": lambda: waste_in_period(engine, start, end),
        }
        node_days = args.nodes * args.days
        for label, fn in parts.items():
            med = timed(fn, args.repeat)
            per_thousand = med / (node_days / 1000)
            print(
                f"{label:<38} median {med:6.2f} s over {args.days} days of {args.nodes} nodes x {args.gpus} "
                f"GPUs; {per_thousand:.3f} s per 1,000 node-days; a month of 1,000 nodes: "
                f"~{per_thousand * MONTH_NODE_DAYS / 1000:,.1f} s"
            )
        if args.profile:
            profiler = cProfile.Profile()
            profiler.runcall(usage_report, engine, GroupBy.USER, start, end)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    finally:
        engine.dispose()
        if name is not None and not args.keep:
            drop_db(name)
    return 0


#: what ``--ends-now`` deletes: (table, its time column)
_AFTER_NOW = (("verdicts", "evaluated_at"), ("gpu_minutes", "minute"), ("job_minutes", "minute"))


def cut_at_now(engine: sa.Engine, now: datetime) -> None:
    """The rows a database has at ``now``: no minutes and no verdicts from ``now`` on (the fill's
    jobs keep their end, which the report clips to its period)."""
    with engine.begin() as conn:
        for table, column in _AFTER_NOW:
            gone = conn.execute(sa.text(f"DELETE FROM {table} WHERE {column} >= :now"), {"now": now}).rowcount
            print(f"--ends-now: {gone:,} rows of {table} from {now:%Y-%m-%d %H:%M} on deleted")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE"))


def store_totals(engine: sa.Engine) -> None:
    """What the daemon's totals pass does for the ended jobs that have none, and what it costs."""
    t0, stored = time.perf_counter(), 0
    while n := store_job_totals(engine):
        stored += n
    took = time.perf_counter() - t0
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE job_totals"))
        held = conn.execute(sa.text("SELECT count(*) FROM job_totals")).scalar_one()
    per_job = f", {1000 * took / stored:.1f} ms per job" if stored else ""
    print(f"job totals: {stored:,} stored in {took:.1f} s{per_job}; {held:,} held")


def fill(engine: sa.Engine, args: argparse.Namespace) -> tuple[datetime, datetime]:
    """Nodes, jobs, minutes and verdicts as the module says; the period they span."""
    for n in range(args.nodes):
        create_token(engine, f"bench{n:04d}")
    end = floor_minute(utcnow()).replace(hour=0, minute=0)
    start = end - timedelta(days=args.days)
    params = {
        "start": start,
        "end": end,
        "days": args.days,
        "gpus": args.gpus,
        "every": args.verdict_every_min,
        "edge": timedelta(hours=1),
    }
    t0 = time.perf_counter()
    with engine.begin() as conn:
        for statement in HOURS if args.hours_only else FILL:
            conn.execute(sa.text(statement), params)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE"))
        tables = ("slurm_jobs", "gpu_minutes", "job_minutes", "verdicts", "job_hours", "verdict_hours")
        counts = {t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in tables}
    print(
        f"filled in {time.perf_counter() - t0:.0f} s: " + ", ".join(f"{k} {v:,}" for k, v in counts.items())
    )
    if not args.hours_only:
        sum_job_hours(engine, end, args.days, args.nodes)
    return start, end


if __name__ == "__main__":
    sys.exit(main())
