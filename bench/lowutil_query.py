"""Cost of ``gpuwatch jobs --low-util --since 7d`` on PostgreSQL vs a naive raw-sample query.

    .venv/bin/python bench/lowutil_query.py [--nodes 10] [--gpus 8] [--days 7] [--interval 10]
                                            [--eval-every-min 15] [--runs 5] [--no-samples]

Generates, straight into a fresh throwaway PostgreSQL database (127.0.0.1:5432 user
postgres, or $GPUWATCH_BENCH_PG), ``--nodes`` nodes x ``--gpus`` GPUs x ``--days`` days:

- ``slurm_jobs``/``job_gpus``: each node runs back-to-back whole-node jobs of 2-12 h
  (seeded), through ``upsert_jobs``/``replace_job_gpus``;
- ``verdicts``: one evaluation per ``--eval-every-min`` of each job's run, two rows each
  (recent + job window), ~35 % of the jobs with a non-healthy cause, as the daemon stores them
  (COPY);
- GPU samples: one per GPU per ``--interval`` s (util per job + noise), packed as the daemon
  packs them (``daemon/store/packing.py``) and COPYed into the daily partitions — only for the
  naive baseline (``--no-samples`` skips it).

Then, median of ``--runs``: the listing (:func:`gpuwatch.views.low_util_jobs`,
``since = now - 7 d``, what the command runs) vs the naive query (mean ``util_gpu_ratio`` of
each job's raw samples over its run, read through ``sql/gpu_readings.py``, jobs under 50 %),
and the ratio. The listing reads
verdicts per job, never samples: its cost follows jobs x evaluations, not samples.

With samples, the daemon's own rollup (:class:`gpuwatch.sql.rollups.Rollup`) then builds
``gpu_minutes`` from them (timed: the rollup rate), and the per-job page is timed on the
longest job: ``gpuwatch job ID``'s data (:func:`gpuwatch.cli.job_detail.job_detail`) and the web
view's (:func:`gpuwatch.views.job_view` with its charts), against a naive per-minute timeline of that
job's raw samples.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import sys
import time
import uuid
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import copy_table, copy_values
from gpuwatch.daemon.store.columns import FIELDS, BatchColumns
from gpuwatch.daemon.store.packing import pack_rows
from gpuwatch.slurm.model import SlurmJob
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.gpu_readings import gpu_samples_between
from gpuwatch.sql.jobs import replace_job_gpus, upsert_jobs
from gpuwatch.sql.partitions import PartitionManager
from gpuwatch.sql.schema import gpu_sample_packs, nodes
from gpuwatch.views import LowUtilFilters, low_util_jobs

ADMIN = os.environ.get("GPUWATCH_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
#: the generated history ends at the current hour, so commands that read "the last 7 days" from
#: the real clock (bench/lowutil_command.py) see it
NOW = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
CAUSES = ["idle_allocation", "input_bound", "small_work", "no_mixed_precision", "cpu_only", "unknown_low"]

NAIVE = """
SELECT j.job_id, avg(s.util_gpu_ratio) AS util, count(*) AS samples
FROM slurm_jobs j
JOIN job_gpus g ON g.job_id = j.job_id
JOIN nodes n ON n.name = g.node
JOIN ({readings}) s ON s.node_id = n.id AND s.gpu_index = g.gpu_index
     AND s.ts >= j.start_at AND s.ts < coalesce(j.end_at, :now)
WHERE j.end_at IS NULL OR j.end_at >= :since
GROUP BY j.job_id
HAVING avg(s.util_gpu_ratio) < 0.5
"""

#: the job page's timeline straight from raw samples: per GPU per minute mean util
NAIVE_JOB = """
SELECT s.gpu_index, date_trunc('minute', s.ts) AS minute, avg(s.util_gpu_ratio), max(s.util_gpu_ratio)
FROM slurm_jobs j
JOIN job_gpus g ON g.job_id = j.job_id
JOIN nodes n ON n.name = g.node
JOIN ({readings}) s ON s.node_id = n.id AND s.gpu_index = g.gpu_index
     AND s.ts >= j.start_at AND s.ts < coalesce(j.end_at, :now)
WHERE j.job_id = :job
GROUP BY 1, 2
"""


def fresh_pg() -> tuple[str, sa.Engine]:
    name = f"gpuwatch_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    engine = create_engine(sa.engine.make_url(ADMIN).set(database=name).render_as_string(hide_password=False))
    migrate.upgrade(engine)
    return name, engine


def drop_pg(name: str) -> None:
    admin = sa.create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def make_jobs(
    n_nodes: int, gpus: int, start: datetime, rng: random.Random
) -> list[tuple[SlurmJob, float, str]]:
    """(job, its mean util, its cause) per job: back-to-back whole-node jobs on every node."""
    out = []
    jid = 1_000_000
    for node in range(n_nodes):
        t = start - timedelta(hours=rng.uniform(0, 6))
        while t < NOW:
            end = t + timedelta(hours=rng.uniform(2, 12))
            running = end > NOW
            bad = rng.random() < 0.35
            cause = rng.choice(CAUSES) if bad else "healthy"
            util = rng.uniform(0.0, 0.4) if bad else rng.uniform(0.7, 0.98)
            name = f"g{node:04d}"
            job = SlurmJob(
                str(jid),
                "squeue-json",
                user=f"u{rng.randrange(50)}",
                account=f"a{rng.randrange(10)}",
                partition="gpu",
                state="RUNNING" if running else "COMPLETED",
                start=t,
                end=None if running else end,
                nodes=(name,),
                gpus=gpus,
                cpus=64,
                gpu_indices={name: tuple(range(gpus))},
            )
            out.append((job, util, cause))
            jid += 1
            t = end
    return out


def copy_text(engine: sa.Engine, sql: str, text: io.StringIO) -> None:
    raw = engine.raw_connection()
    try:
        with raw.cursor() as cur, cur.copy(sql) as cp:
            cp.write(text.getvalue())
        raw.commit()
    finally:
        raw.close()


#: each verdict's evidence, of the shape and size (~900 B) the classifier stores for a rule
EVIDENCE = json.dumps({
    "signals": {"gap_fraction": 0.6, "burst_util": 0.949828, "cpu_ratio": 0.991627, "iowait": 0.005021,
                "cpu_used_cores": 7.933017, "cpu_allocated_cores": 8.0, "util_std": 0.002406},
    "thresholds": {"duty_idle_fraction_ratio": 0.3, "duty_burst_util_ratio": 0.6, "cpu_saturated_ratio": 0.9,
                   "iowait_high_ratio": 0.2},
    "checks": [{"signal": s, "op": ">=", "threshold": t, "passed": True, "margin": 1.0} for s, t in (
        ("gap_fraction", "duty_idle_fraction_ratio"), ("burst_util", "duty_burst_util_ratio"),
        ("cpu_ratio", "cpu_saturated_ratio"), ("iowait", "iowait_high_ratio"))],
    "missing": [], "notes": [],
    "confidence": {"base": 0.85, "weakest": {"signal": "cpu_ratio", "margin": 0.407}},
    "window": {"kind": "recent", "start": "2026-12-06T05:50:00+00:00", "end": "2026-12-06T06:00:00+00:00"},
    "models": ["NVIDIA H200"], "gpm": True, "window_missing": [], "not_checked": [],
})  # fmt: skip


def load_verdicts(engine: sa.Engine, jobs: list[tuple[SlurmJob, float, str]], every: timedelta) -> int:
    buf = io.StringIO()
    rows = 0
    for job, util, cause in jobs:
        stop = NOW if job.end is None else job.end
        at = job.start + every
        while True:
            at = min(at, stop)
            hours = (at - job.start).total_seconds() / 3600 * job.gpus
            wasted = 0.0 if cause == "healthy" else hours * (1 - util)
            for kind, ws in (("recent", max(job.start, at - timedelta(minutes=15))), ("job", job.start)):
                summary = f"job {job.job_id}: {cause} (util {100 * util:.0f}%)"
                buf.write(
                    f"{job.job_id}\t{at.isoformat()}\t{kind}\t{ws.isoformat()}\t{at.isoformat()}\t{cause}\t"
                    f"0.9\t{job.gpus}\t{hours:.4f}\t{wasted:.4f}\t{util:.4f}\t{summary}\t\\N\t{EVIDENCE}\t1\n"
                )
                rows += 1
            if at >= stop:
                break
            at += every
    copy_text(
        engine,
        "COPY verdicts (job_id, evaluated_at, window_kind, window_start, window_end, cause, confidence, "
        "gpus, gpu_hours, gpu_hours_wasted, mean_util_ratio, summary, fix, evidence, rules_version) "
        "FROM STDIN",
        buf,
    )
    return rows


def load_samples(
    engine: sa.Engine,
    jobs,
    node_ids: dict[str, int],
    gpus: int,
    start: datetime,
    interval: int,
    rng: random.Random,
) -> int:
    PartitionManager(engine).ensure_days(
        date.fromordinal(d) for d in range(start.date().toordinal(), NOW.date().toordinal() + 1)
    )
    steps = int((NOW - start).total_seconds() // interval)
    stamps = [(start + timedelta(seconds=interval * k)) for k in range(steps)]
    by_node: dict[str, list] = {}
    for job, util, _ in jobs:
        by_node.setdefault(job.nodes[0], []).append((job.start, job.end or NOW, util))
    total = 0
    for node, spans in by_node.items():
        nid = node_ids[node]
        utils = []
        k = 0
        for t in stamps:
            while k < len(spans) and spans[k][1] <= t:
                k += 1
            utils.append(spans[k][2] if k < len(spans) and spans[k][0] <= t else 0.0)
        noise = [[rng.uniform(-0.05, 0.05) for _ in range(64)] for _ in range(gpus)]
        n = len(stamps) * gpus
        columns: dict[str, Any] = {name: None for name in FIELDS["gpu"]}
        columns |= {
            "ts": [t for t in stamps for _ in range(gpus)],
            "gpu_index": list(range(gpus)) * len(stamps),
            "state": ["ok"] * n,
            "util_gpu_ratio": [
                round(min(1.0, max(0.0, utils[i] + noise[g][i & 63])), 3)
                for i in range(len(stamps))
                for g in range(gpus)
            ],
            "simulated": [False] * n,
        }
        batch = BatchColumns("bench", 0, "bench", {"gpu": columns}, None, n, frozenset(stamps))
        packs = pack_rows(nid, batch)[gpu_sample_packs.name]
        with engine.begin() as conn:
            cur = conn.connection.dbapi_connection.cursor()
            copy_table(cur, gpu_sample_packs, [copy_values(gpu_sample_packs, row) for row in packs])
        total += n
    return total


def readings_sql(engine: sa.Engine) -> str:
    """The SQL of every stored GPU reading, as ``sql/gpu_readings.py`` unpacks them."""
    with engine.connect() as conn:
        return str(gpu_samples_between(conn).element)


def timed(fn, runs: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def job_page(engine: sa.Engine, jobs, start: datetime, n_samples: int, runs: int) -> None:
    """Roll the samples up with the daemon's own code, then time the per-job page."""
    from gpuwatch.cli.job_detail import job_detail
    from gpuwatch.sql.rollups import Rollup
    from gpuwatch.views import job_view

    t = time.perf_counter()
    Rollup(engine).roll(start, NOW)
    rolled_s = time.perf_counter() - t
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE gpu_minutes"))
        minutes = conn.execute(sa.text("SELECT count(*) FROM gpu_minutes")).scalar_one()
    print(
        f"rollup   (Rollup.roll, whole range):  {rolled_s:8.1f} s for {n_samples:,} samples "
        f"-> {minutes:,} gpu_minutes rows = {n_samples / rolled_s:,.0f} samples/s"
    )
    longest, _, _ = max(jobs, key=lambda j: ((j[0].end or NOW) - j[0].start, j[0].job_id))
    hours = ((longest.end or NOW) - longest.start).total_seconds() / 3600
    cli_s, detail = timed(lambda: job_detail(engine, longest.job_id, NOW), runs)
    web_s, _ = timed(lambda: job_view(engine, longest.job_id, NOW, charts=True), runs)
    assert detail is not None and detail["gpus"], "the job page found no GPUs"

    def naive():  # type: ignore[no-untyped-def]
        with engine.connect() as conn:
            query = sa.text(NAIVE_JOB.format(readings=readings_sql(engine)))
            return conn.execute(query, {"now": NOW, "job": longest.job_id}).all()

    naive_s, rows = timed(naive, runs)
    print(
        f"job page (job {longest.job_id}, {hours:.1f} h x {len(detail['gpus'])} GPUs): "
        f"gpuwatch job {1000 * cli_s:.1f} ms, web job_view {1000 * web_s:.1f} ms; "
        f"naive timeline from raw samples {1000 * naive_s:.1f} ms ({len(rows):,} GPU-minutes); "
        f"ratio naive / gpuwatch job = {naive_s / cli_s:.1f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--interval", type=int, default=10)
    ap.add_argument("--eval-every-min", type=float, default=15)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-samples", action="store_true")
    args = ap.parse_args()
    rng = random.Random(7)
    start = NOW - timedelta(days=args.days)
    name, engine = fresh_pg()
    try:
        t0 = time.perf_counter()
        jobs = make_jobs(args.nodes, args.gpus, start, rng)
        with engine.begin() as conn:
            conn.execute(
                nodes.insert(), [{"name": f"g{n:04d}", "created_at": NOW} for n in range(args.nodes)]
            )
            node_ids = dict(conn.execute(sa.select(nodes.c.name, nodes.c.id)).all())
            upsert_jobs(conn, [j for j, _, _ in jobs], now=NOW)
            replace_job_gpus(conn, {j.job_id: j.gpu_indices for j, _, _ in jobs})
        n_verdicts = load_verdicts(engine, jobs, timedelta(minutes=args.eval_every_min))
        n_samples = 0
        if not args.no_samples:
            n_samples = load_samples(engine, jobs, node_ids, args.gpus, start, args.interval, rng)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE"))
        unhealthy = sum(1 for _, _, c in jobs if c != "healthy")
        print(
            f"generated {args.nodes} nodes x {args.gpus} GPUs x {args.days:g} d "
            f"in {time.perf_counter() - t0:.0f} s: "
            f"{len(jobs)} jobs ({unhealthy} not healthy), {n_verdicts:,} verdict rows, "
            f"{n_samples:,} GPU samples"
        )
        since = NOW - timedelta(days=7)
        listing_s, rows = timed(
            lambda: low_util_jobs(engine, LowUtilFilters(since=since, evaluated_since=since), now=NOW),
            args.runs,
        )
        print(
            f"listing  (low_util_jobs, --since 7d): median {1000 * listing_s:8.1f} ms over {args.runs} runs, "
            f"{len(rows)} jobs"
        )
        if n_samples:
            readings = readings_sql(engine)

            def naive():  # type: ignore[no-untyped-def]
                with engine.connect() as conn:
                    query = sa.text(NAIVE.format(readings=readings))
                    return conn.execute(query, {"now": NOW, "since": since}).all()

            naive_s, found = timed(naive, max(1, min(3, args.runs)))
            print(
                f"naive    (mean of raw GPU samples):   median {1000 * naive_s:8.1f} ms over "
                f"{max(1, min(3, args.runs))} runs, {len(found)} jobs"
            )
            print(f"ratio    naive / listing = {naive_s / listing_s:,.0f}x")
            job_page(engine, jobs, start, n_samples, args.runs)
    finally:
        engine.dispose()
        drop_pg(name)


if __name__ == "__main__":
    main()
