"""What the per-process GPU readings cost the store path: the same batches with and without them.

    .venv/bin/python bench/process_rows.py [--nodes 32] [--cycles 30] [--group 32] [--rounds 5]

The processes (2 per GPU in ``bench/ingest.py``'s batches) are a packed row per batch and day
(``gpu_process_packs``, ``sql/process_packs.py``); this shows what they cost. Stores the same
one-cycle batches with ``BatchStore.store_many`` in groups of ``--group``, once as they are
and once with every GPU sample's ``processes`` removed, in interleaved rounds on fresh
PostgreSQL databases (127.0.0.1:5432 or $GPUWATCH_BENCH_PG); prints samples/s, medians and
the ratio: what storing the processes costs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import drop_db, fresh_db, make_batches, register
from gpuwatch import wire
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.gc_tuning import DAEMON_THRESHOLDS, settle


def without_processes(batch: wire.Batch) -> wire.Batch:
    samples = [
        s.model_copy(update={"processes": None}) if isinstance(s, wire.GpuSample) else s
        for s in batch.samples
    ]
    return batch.model_copy(update={"samples": samples})


def one_side(args: argparse.Namespace, strip: bool) -> float:
    batches = make_batches(args.nodes, args.cycles, 8, timedelta(0), 1)
    if strip:
        batches = [without_processes(b) for b in batches]
    # the daemon's GC settings, and the batches out of every collection: a daemon does not keep
    # a thousand batches alive, and without this the collector's passes over them (more objects
    # with processes) were most of the difference this measures (1.27-1.65x vs 1.18x)
    settle(DAEMON_THRESHOLDS)
    name, _, engine = fresh_db()
    try:
        store = BatchStore(engine)
        ids = register(engine, store, batches)
        t0 = time.perf_counter()
        for i in range(0, len(batches), args.group):
            store.store_many([(ids[b.node], b) for b in batches[i : i + args.group]])
        elapsed = time.perf_counter() - t0
    finally:
        engine.dispose()
        drop_db(name)
    return sum(len(b.samples) for b in batches) / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--group", type=int, default=32, help="batches per store_many (group commit)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rates: dict[str, list[float]] = {"with processes": [], "without": []}
    for _ in range(args.rounds):
        for side in rates:
            rates[side].append(one_side(args, strip=side == "without"))
    for side, values in rates.items():
        rounds = ", ".join(f"{v:,.0f}" for v in values)
        print(f"{side:>15}: {statistics.median(values):,.0f} samples/s ({rounds})")
    ratio = statistics.median(rates["without"]) / statistics.median(rates["with processes"])
    print(f"without / with: {ratio:.2f}x (the samples count the same: GPU + host samples, not process rows)")


if __name__ == "__main__":
    main()
