"""Seconds to roll up an hour of a cluster's raw samples into per-minute rows (PostgreSQL).

    .venv/bin/python bench/rollup_time.py [--nodes 20] [--gpus 8] [--hours 1] [--repeat 3]

Makes a throwaway database (as ``bench/ingest.py``: 127.0.0.1:5432 or $GPUWATCH_BENCH_PG),
stores ``hours`` of 10 s cycles of ``nodes`` nodes (``tests/factories.py`` samples), then times
``Rollup.roll`` over the whole span ``repeat`` times (a re-roll deletes and inserts the same
rows, so every pass does the same work) and prints the minimum, median and maximum, and per
1,000 GPU-minutes. For an A/B against another revision run the same command in a worktree of
it on the same machine, one after the other.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import _cycle, drop_db, fresh_db
from gpuwatch import wire
from gpuwatch.clock import utcnow
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.rollups import Rollup, floor_minute

INTERVAL_S = 10


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    name, _url, engine = fresh_db()
    try:
        store = BatchStore(engine)
        ids = {}
        for n in range(args.nodes):
            node = f"bench{n:04d}"
            create_token(engine, node)
            with engine.connect() as conn:
                ids[node] = get_node(conn, node).id
        cycles = int(args.hours * 3600 / INTERVAL_S)
        start = floor_minute(utcnow() - timedelta(hours=args.hours + 1))
        end = start + timedelta(seconds=INTERVAL_S * cycles)
        store.partitions.ensure_days({start.date(), end.date()})
        for c in range(cycles):
            ts = start + timedelta(seconds=INTERVAL_S * c)
            store.store_many(
                [
                    (
                        node_id,
                        wire.Batch(node=node, agent_version="bench", seq=c, samples=_cycle(ts, args.gpus)),
                    )
                    for node, node_id in ids.items()
                ]
            )
        rollup = Rollup(engine)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            rollup.roll(start, end + timedelta(minutes=1))
            times.append(time.perf_counter() - t0)
        gpu_minutes = args.nodes * args.gpus * args.hours * 60
        med = statistics.median(times)
        print(
            f"rollup of {args.nodes} nodes x {args.gpus} GPUs x {args.hours:g} h "
            f"({gpu_minutes:,.0f} GPU-minutes): "
            f"min {min(times):.2f} s, median {med:.2f} s, max {max(times):.2f} s; "
            f"{1000 * med / gpu_minutes:.3f} s per 1,000 GPU-minutes"
        )
    finally:
        engine.dispose()
        drop_db(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
