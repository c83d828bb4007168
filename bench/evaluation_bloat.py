"""What classifier passes leave in ``newest_evaluations`` (or ``verdict_hours``): row triggers
against statement triggers, side by side.

    .venv/bin/python bench/evaluation_bloat.py [--jobs 20000] [--history 10] [--passes 6] [--autovacuum]
        [--table newest_evaluations|verdict_hours]

Makes two throwaway PostgreSQL databases (127.0.0.1:5432 or $GPUWATCH_BENCH_PG, named
``gpuwatch_evalbloat_*``, dropped at the end). ``--table newest_evaluations`` (the default): one
migrated to revision 0025 (the row triggers that keep ``newest_evaluations``), one to 0029 (0026's
statement triggers; both keep ``verdict_hours`` by 0019's row triggers). ``--table
verdict_hours``: one at 0029 (0019's row triggers keep ``verdict_hours``), one at the head (0030:
statement triggers); both keep ``newest_evaluations`` by 0026's statement triggers. First ``--history``
evaluations of every job (15 minutes apart, 3 verdicts each) in one ``INSERT ... SELECT`` in
time order, as an import or a COPY of a dump writes them; then ``--passes``
classifier passes, each of ``--jobs`` running jobs x 3 verdicts (job, segment, recent windows;
causes seeded, a third naming waste), 2 minutes apart, stored through
:func:`gpuwatch.classify.runner.store_evaluations` into each database in turn (the order
alternating from pass to pass), the same rows in both. Autovacuum is off for the table unless
``--autovacuum``: the size is what the passes leave until a vacuum. Prints, per pass and
database, the pass's wall time and the table's ``pg_total_relation_size``; at the end the
table's heap and index sizes, the row versions written (``n_tup_ins + n_tup_upd``, of them HOT)
and dead, the time spent in each trigger function over the whole run (``track_functions =
'pl'``), and whether both databases hold the same rows.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import ADMIN, drop_db
from gpuwatch.classify.runner import store_evaluations
from gpuwatch.classify.verdict import Cause, Verdict
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine

T0 = datetime(2026, 12, 7, 0, 0, tzinfo=timezone.utc)
WINDOWS = ("job", "segment", "recent")
CAUSES = (Cause.HEALTHY, Cause.HEALTHY, Cause.IDLE_ALLOCATION, Cause.INPUT_BOUND, Cause.UNKNOWN_LOW)
#: per table compared: label -> the revision its database runs at
KINDS = {
    "newest_evaluations": {"row triggers (0025)": "0025", "statement triggers (0026)": "0029"},
    "verdict_hours": {"row triggers (0029)": "0029", "statement triggers (0030)": "head"},
}

#: ``--history`` earlier evaluations of every job, 15 minutes apart, 3 verdicts each, in one
#: statement (as ``gpuwatch import`` or a COPY of a dump writes them: in time order)
_HISTORY = """INSERT INTO verdicts (job_id, evaluated_at, window_kind, window_start, window_end, cause,
                          confidence, gpus, gpu_hours, gpu_hours_wasted, mean_util_ratio, summary,
                          fix, evidence, rules_version)
    SELECT (100000 + j)::text, at, w.kind, at - interval '10 minutes', at, c.cause, 0.7, 4, 4.0, 0.5,
           0.1, 'job ' || (100000 + j) || ': ' || c.cause, 'f', '{"values": {"gpus": 4}}', 't'
    FROM generate_series(1, :history) e
    CROSS JOIN LATERAL (SELECT CAST(:t0 AS timestamptz) - (:history + 1 - e) * interval '15 minutes' AS at) t
    CROSS JOIN generate_series(0, :jobs - 1) j
    CROSS JOIN (VALUES (0, 'job'), (1, 'segment'), (2, 'recent')) w(n, kind)
    CROSS JOIN LATERAL (SELECT (ARRAY['healthy', 'healthy', 'idle_allocation', 'input_bound',
                                      'unknown_low'])[1 + (j * 7 + e * 3 + w.n) % 5] AS cause) c
    ORDER BY e, j, w.n"""
#: the time spent in each trigger function on ``verdicts`` (``track_functions = 'pl'``), own
#: time: a function's statements, not the triggers they fire
_FUNCTIONS = """SELECT funcname, calls, self_time FROM pg_stat_user_functions
    WHERE funcname LIKE 'gpuwatch%' ORDER BY self_time DESC"""
_SIZE = "SELECT pg_total_relation_size('{table}')"
#: the table's rows, to compare the two databases (the same rows in the same order get the same ids)
_ROWS = {
    "newest_evaluations": "SELECT job_id, evaluated_at, waste FROM newest_evaluations ORDER BY job_id",
    "verdict_hours": """SELECT job_id, hour, cause, whole_at, whole_id, whole_wasted, recent_id, recent_wasted
        FROM verdict_hours ORDER BY job_id, hour, cause""",
}
_STATS = """SELECT pg_total_relation_size('{table}'), pg_relation_size('{table}'),
                   pg_indexes_size('{table}'), n_tup_ins + n_tup_upd, n_tup_hot_upd, n_dead_tup
            FROM pg_stat_user_tables WHERE relname = '{table}'"""


def a_pass(k: int, jobs: int) -> dict[str, tuple[datetime, list[Verdict]]]:
    """Pass ``k``: every job's 3 verdicts, evaluated at ``T0 + 2 k`` minutes."""
    rnd = random.Random(k)
    at = T0 + timedelta(minutes=2 * k)
    results = {}
    for n in range(jobs):
        job = str(100000 + n)
        found = []
        for window in WINDOWS:
            cause = rnd.choice(CAUSES)
            found.append(
                Verdict(
                    job_id=job, window_kind=window, window_start=at - timedelta(minutes=10),
                    window_end=at, cause=cause, confidence=rnd.choice((0.5, 0.7, 0.9)),
                    summary=f"job {job}: {cause.value}", fix="f", evidence={"values": {"gpus": 4}},
                    gpus=4, gpu_hours=4.0, gpu_hours_wasted=rnd.choice((None, 0.5, 2.0)),
                    mean_util_ratio=0.1,
                )
            )  # fmt: skip
        results[job] = (at, found)
    return results


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--history", type=int, default=10, help="evaluations a job stored first, in one INSERT")
    ap.add_argument("--autovacuum", action="store_true", help="leave autovacuum on for the table")
    ap.add_argument("--table", choices=sorted(KINDS), default="newest_evaluations", help="the table compared")
    args = ap.parse_args()
    table, kinds = args.table, KINDS[args.table]
    size_sql, stats_sql = _SIZE.format(table=table), _STATS.format(table=table)

    tag = uuid.uuid4().hex[:8]
    names = {label: f"gpuwatch_evalbloat_{tag}_{rev}" for label, rev in kinds.items()}
    engines: dict[str, sa.Engine] = {}
    admin = sa.create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    try:
        for label, rev in kinds.items():
            with admin.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{names[label]}"'))
                conn.execute(sa.text(f"ALTER DATABASE \"{names[label]}\" SET track_functions = 'pl'"))
            url = sa.engine.make_url(ADMIN).set(database=names[label]).render_as_string(hide_password=False)
            engines[label] = create_engine(url)
            migrate.upgrade(engines[label], rev)
            if not args.autovacuum:
                with engines[label].begin() as conn:
                    conn.execute(sa.text(f"ALTER TABLE {table} SET (autovacuum_enabled = false)"))
        print(f"{args.jobs:,} jobs x 3 verdicts a pass, {args.passes} passes after {args.history} "
              f"evaluations a job stored in one statement; autovacuum on {table}: "
              f"{'on' if args.autovacuum else 'off'}")  # fmt: skip
        if args.history:
            line = []
            for label, engine in engines.items():
                t0 = time.perf_counter()
                with engine.begin() as conn:
                    conn.execute(sa.text(_HISTORY), {"history": args.history, "jobs": args.jobs, "t0": T0})
                took = time.perf_counter() - t0
                with engine.connect() as conn:
                    size = conn.execute(sa.text(size_sql)).scalar()
                line.append(f"{label}: {took:6.2f} s, {mib(size)}")
            print(f"history ({args.history * args.jobs * 3:,} rows): " + "; ".join(line))
        times: dict[str, list[float]] = {label: [] for label in kinds}
        for k in range(args.passes):
            results = a_pass(k, args.jobs)
            order = list(kinds) if k % 2 == 0 else list(reversed(kinds))
            line = []
            for label in order:
                t0 = time.perf_counter()
                store_evaluations(engines[label], results)
                took = time.perf_counter() - t0
                times[label].append(took)
                with engines[label].connect() as conn:
                    size = conn.execute(sa.text(size_sql)).scalar()
                line.append(f"{label}: {took:6.2f} s, {mib(size)}")
            print(f"pass {k}: " + "; ".join(sorted(line)))
        for engine in engines.values():
            engine.dispose()  # the sessions that stored the passes end, and report their counts
        time.sleep(2)
        answers = []
        for label, engine in engines.items():
            with engine.connect() as conn:
                total, heap, index, written, hot, dead = conn.execute(sa.text(stats_sql)).one()
                answers.append(conn.execute(sa.text(_ROWS[table])).all())
                functions = conn.execute(sa.text(_FUNCTIONS)).all()
            later = times[label][1:] or times[label]
            print(
                f"{label}: {table} {mib(total)} (heap {mib(heap)}, indexes {mib(index)}) for "
                f"{len(answers[-1]):,} rows; row versions written {written:,} ({hot:,} HOT updates), "
                f"dead {dead:,}; a pass after the first: median {statistics.median(later):.2f} s "
                f"({min(later):.2f}-{max(later):.2f})"
            )
            print(
                "    in trigger functions: "
                + ", ".join(f"{f} {ms:,.0f} ms ({n:,} calls)" for f, n, ms in functions)
            )
        print(f"same rows in both: {answers[0] == answers[1]}")
    finally:
        for engine in engines.values():
            engine.dispose()
        admin.dispose()
        for name in names.values():
            drop_db(name)


if __name__ == "__main__":
    main()
