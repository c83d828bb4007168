"""Seconds of the command ``gpuwatch jobs --low-util --since 7d`` itself, process start to exit.

    .venv/bin/python bench/lowutil_command.py [--nodes 1000] [--days 7] [--eval-every-min 15]
                                              [--runs 5] [--db URL] [--keep]

Fills a throwaway PostgreSQL database as ``bench/lowutil_query.py --no-samples`` does (127.0.0.1:5432
or $GPUWATCH_BENCH_PG): ``nodes`` nodes running back-to-back 8-GPU jobs of 2-12 h for ``days``
days up to the current hour, an evaluation every ``eval-every-min`` minutes of each job's run
(recent and whole-job windows, a third of the jobs wasting); or reads the database at ``--db``.
Then runs the installed command as a user would (a new process each run: interpreter start,
imports, schema check, the listing, rendering, writing to a pipe), as a table (the first
:data:`gpuwatch.cli.jobs.TABLE_PAGE` rows and a line saying how many more) and as JSON (every
row), and prints each one's median wall time over ``runs`` runs after a warm-up and the bytes it
wrote; then the same command on an empty database (start-up alone) and the listing called
in-process. The issue's goal: under 1 s at 1,000 nodes and under 2 s at 10,000.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import lowutil_query as lq
from gpuwatch.sql.jobs import replace_job_gpus, upsert_jobs
from gpuwatch.sql.schema import nodes
from gpuwatch.views import LowUtilFilters, low_util_jobs

GPUWATCH = str(Path(sys.executable).with_name("gpuwatch"))
#: jobs per COPY of their verdicts (bounds the text held in memory at 10,000 nodes)
CHUNK_JOBS = 2000


def fill(engine: sa.Engine, n_nodes: int, days: float, every: timedelta) -> str:
    rng = random.Random(7)
    jobs = lq.make_jobs(n_nodes, 8, lq.NOW - timedelta(days=days), rng)
    with engine.begin() as conn:
        conn.execute(nodes.insert(), [{"name": f"g{n:04d}", "created_at": lq.NOW} for n in range(n_nodes)])
        upsert_jobs(conn, [j for j, _, _ in jobs], now=lq.NOW)
        replace_job_gpus(conn, {j.job_id: j.gpu_indices for j, _, _ in jobs})
    rows = sum(
        lq.load_verdicts(engine, jobs[i : i + CHUNK_JOBS], every) for i in range(0, len(jobs), CHUNK_JOBS)
    )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE"))
    wasting = sum(1 for _, _, cause in jobs if cause != "healthy")
    return f"{len(jobs):,} jobs ({wasting:,} wasting), {rows:,} verdict rows"


def run_command(url: str, *extra: str, runs: int) -> tuple[float, int]:
    """(median seconds, bytes written) of ``gpuwatch --db URL jobs --low-util --since 7d EXTRA``."""
    argv = [GPUWATCH, "--db", url, "jobs", "--low-util", "--since", "7d", *extra]
    times, size = [], 0
    for k in range(runs + 1):
        t = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, check=False)
        elapsed = time.perf_counter() - t
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode()[-300:]}")
        size = len(done.stdout)
        if k:  # the first run warms the page cache
            times.append(elapsed)
    return statistics.median(times), size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--eval-every-min", type=float, default=15)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--db", help="time the command on this database instead of a generated one")
    ap.add_argument("--keep", action="store_true", help="keep the generated database (its URL is printed)")
    args = ap.parse_args()
    names = []
    try:
        if args.db:
            url = args.db
        else:
            name, engine = lq.fresh_pg()
            names.append(name)
            t0 = time.perf_counter()
            facts = fill(engine, args.nodes, args.days, timedelta(minutes=args.eval_every_min))
            url = engine.url.render_as_string(hide_password=False)
            engine.dispose()
            if args.keep:
                names.remove(name)
                print(f"kept: {url}")
            print(
                f"generated {args.nodes:,} nodes x 8 GPUs x {args.days:g} d "
                f"in {time.perf_counter() - t0:.0f} s: {facts}"
            )
        empty_name, empty = lq.fresh_pg()
        names.append(empty_name)
        empty_url = empty.url.render_as_string(hide_password=False)
        empty.dispose()
        for label, extra in (("table", ()), ("json", ("--format", "json"))):
            seconds, size = run_command(url, *extra, runs=args.runs)
            goal = 1.0 if args.nodes <= 1000 else 2.0
            verdict = "ok" if seconds < goal else "over the goal"
            print(
                f"command, {label:<5}  median {seconds:6.2f} s  {size / 1024:9.0f} KiB  "
                f"({verdict}: {goal:g} s)"
            )
        seconds, _ = run_command(empty_url, runs=args.runs)
        print(f"command, empty database (start-up, schema check, no rows): median {seconds:6.2f} s")
        engine = sa.create_engine(url)
        since = lq.NOW - timedelta(days=7)
        filters = LowUtilFilters(since=since, evaluated_since=since)
        times, found = [], []
        for _ in range(args.runs):
            t = time.perf_counter()
            found = low_util_jobs(engine, filters, now=lq.NOW)
            times.append(time.perf_counter() - t)
        engine.dispose()
        print(
            f"listing in-process (low_util_jobs): median {statistics.median(times):6.2f} s, "
            f"{len(found):,} jobs"
        )
    finally:
        for name in names:
            lq.drop_pg(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
