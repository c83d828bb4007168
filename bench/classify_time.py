"""What the segment window costs the classifier: one job's evaluation with and without it.

    .venv/bin/python bench/classify_time.py [--jobs 10] [--gpus 8] [--hours 24] [--repeat 3]

Makes a throwaway PostgreSQL database (as ``bench/ingest.py``: 127.0.0.1:5432 or
$GPUWATCH_BENCH_PG) and fills ``gpu_minutes`` in SQL: ``--jobs`` running jobs, one per node,
each on ``--gpus`` GPUs for ``--hours`` hours, every GPU a row per minute (utilization and SM
activity with noise; the last GPU of each job goes idle two thirds of the way through, so
every job has a phase to find), and folds its complete hours into ``gpu_hours`` as the
daemon's rollup pass does (the windows read those hours and the minutes around them,
``sql/resolution.spans``). Then, per job, the median of ``--repeat`` runs after a warm-up of:

- the two windows the classifier judged before segments (features of ``recent`` and ``job``,
  every rule on each): :func:`~gpuwatch.classify.features.job_windows` + ``classify_window``;
- the segment window alone (change points on every GPU's two per-minute series, then its
  features): :func:`~gpuwatch.classify.segments.segment_window`;
- the whole evaluation, :func:`~gpuwatch.classify.engine.classify_job`;
- the job's page (:func:`~gpuwatch.views.job_view`, what ``gpuwatch job ID`` and the web
  view's job page show), read after the job was evaluated;

and prints the per-job milliseconds and the ratio whole / two windows. The daemon evaluates
every running job every ``classify.evaluate_interval_s`` (120 s): jobs x the whole evaluation
is what that pass costs.

``--minutes-kept H`` then drops the minutes older than the last ``H`` whole hours, as retention
does, so the jobs began before the minutes kept: the windows read whole hours, and the job's
page and its charts (the web view's: ``job_view(charts=True)``) read the hourly rows to the
job's end, the hour not folded yet folded from its minutes (``sql/resolution.tier_for``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import drop_db, fill_in_sql, fresh_db
from bench.report_time import timed
from gpuwatch.classify.engine import classify_job, classify_window
from gpuwatch.classify.features import job_windows, load_scope
from gpuwatch.classify.runner import evaluate_running
from gpuwatch.classify.segments import segment_window
from gpuwatch.clock import utcnow
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T
from gpuwatch.sql import hours, progress
from gpuwatch.sql.buckets import floor_hour
from gpuwatch.sql.nodes import create_token
from gpuwatch.sql.rollups import floor_minute
from gpuwatch.views import job_view

FILL = [
    """INSERT INTO slurm_jobs (job_id, source, name, user_name, account, partition, state, start_at,
                               gpus, cpus, memory_bytes, first_seen_at, updated_at)
       SELECT n.name, 'bench', 'train', 'u1', 'a1', 'gpu', 'RUNNING', :start, :gpus, 64, 512 * 2^30,
              :start, :start
       FROM nodes n WHERE n.name LIKE 'bench%'""",
    """INSERT INTO job_gpus (job_id, node, gpu_index)
       SELECT n.name, n.name, g FROM nodes n, generate_series(0, :gpus - 1) g WHERE n.name LIKE 'bench%'""",
    # busy ~0.8 with noise; the last GPU idle from two thirds of the run on
    """INSERT INTO gpu_minutes (node_id, gpu_index, minute, samples, lost_samples, util_gpu_ratio_sum,
                                util_gpu_ratio_n, sm_active_ratio_sum, sm_active_ratio_n, util_bin_0,
                                memory_used_bytes_max, memory_total_bytes, power_limit_watts)
       SELECT n.id, g, m, 6, 0, v.u * 6, 6, v.u * 0.8 * 6, 6, CASE WHEN v.u = 0 THEN 6 ELSE 0 END,
              60 * 2^30, 80 * 2^30, 700
       FROM nodes n, generate_series(0, :gpus - 1) g,
            generate_series(:start, :end - interval '1 minute', interval '1 minute') m,
            LATERAL (SELECT CASE WHEN g = :gpus - 1 AND m >= :change THEN 0.0
                                 ELSE 0.75 + 0.1 * random() END AS u) v
       WHERE n.name LIKE 'bench%'""",
    """INSERT INTO rollup_state (name, done_until) VALUES ('minutes', :end)""",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--minutes-kept", type=int, default=None, metavar="H")
    args = ap.parse_args()
    name, _url, engine = fresh_db()
    try:
        for n in range(args.jobs):
            create_token(engine, f"bench{n:04d}")
        end = floor_minute(utcnow())
        start = end - timedelta(hours=args.hours)
        change = start + timedelta(hours=args.hours * 2 / 3)
        params = {"start": start, "end": end, "change": change, "gpus": args.gpus}
        rows = fill_in_sql(engine, FILL, params)
        # what retention leaves: the hours, and the minutes from the cut on
        cut = None if args.minutes_kept is None else floor_hour(end) - timedelta(hours=args.minutes_kept)
        with engine.begin() as conn:
            folded = hours.advance(conn, end)
            if cut is not None:
                conn.exec_driver_sql("DELETE FROM gpu_minutes WHERE minute < %(cut)s", {"cut": cut})
                progress.set_done_until(conn, hours.MINUTES_FROM, cut)
        kept = (
            "" if args.minutes_kept is None else f", minutes kept from {args.minutes_kept} h before the hour"
        )
        print(
            f"{args.jobs} jobs x {args.gpus} GPUs x {args.hours} h: {rows:,} gpu_minutes rows, "
            f"{folded} hours folded{kept}"
        )

        two, seg, whole, page, charts = [], [], [], [], []
        found_segment = 0
        # a change before the minutes kept is placed to the hour (classify/segments.py)
        minutes_gone = cut is not None and change < cut
        tolerance = timedelta(hours=1) if minutes_gone else timedelta(minutes=2)
        with engine.connect() as conn:
            for n in range(args.jobs):
                scope = load_scope(conn, f"bench{n:04d}")
                assert scope is not None

                def two_windows(scope=scope):
                    recent, job = job_windows(conn, scope, end, T)
                    return classify_window(recent, T) + classify_window(job, T)

                job_features = job_windows(conn, scope, end, T)[1]
                two.append(timed(two_windows, args.repeat))
                seg.append(
                    timed(lambda scope=scope, f=job_features: segment_window(conn, scope, T, f), args.repeat)
                )
                whole.append(timed(lambda scope=scope: classify_job(conn, scope.job_id, end), args.repeat))
                found = segment_window(conn, scope, T, job_features)
                found_segment += found is not None and abs(found.start - change) <= tolerance
        evaluate_running(engine, end)
        for n in range(args.jobs):
            page.append(timed(lambda n=n: job_view(engine, f"bench{n:04d}", end), args.repeat))
            charts.append(timed(lambda n=n: job_view(engine, f"bench{n:04d}", end, charts=True), args.repeat))
        ms = {
            k: 1000 * statistics.median(v)
            for k, v in (("two", two), ("seg", seg), ("whole", whole), ("page", page), ("charts", charts))
        }
        print(
            f"per job, median over jobs: two windows {ms['two']:.0f} ms, segment window {ms['seg']:.0f} ms, "
            f"whole evaluation {ms['whole']:.0f} ms (x{ms['whole'] / ms['two']:.2f} the two windows)"
        )
        within = "the hour" if minutes_gone else "2 min"
        print(f"segment found at the change (within {within}) in {found_segment}/{args.jobs} jobs")
        print(
            f"the job's page (views.job_view), median over jobs: {ms['page']:.0f} ms; "
            f"with its charts (the web view's): {ms['charts']:.0f} ms"
        )
        return 0
    finally:
        engine.dispose()
        drop_db(name)


if __name__ == "__main__":
    raise SystemExit(main())
