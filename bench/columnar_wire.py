"""Wire format v1 vs v2 for the daemon: bytes and parse time of the same batches.

    .venv/bin/python bench/columnar_wire.py [--cycles 1,30] [--gpus 8] [--rounds 15]

v1 (``gpuwatch/wire/v1.py``) sends one JSON object per sample; the daemon validates each into a
pydantic model. v2 (``gpuwatch/wire/v2.py``) sends one array per field per sample kind; the
daemon validates lists. For each batch size (cycles per batch: 1 is the agent's normal push,
30 a multi-cycle batch) this builds ``bench/ingest.py``'s realistic batch (8 GPUs with 2
processes each, and the host samples), encodes it as the agent does (``wire_v2.encode``),
checks that the v2 body decodes to exactly the same samples, then times
``model_validate_json`` of each, interleaved, and prints medians per batch and per GPU-sample
and their ratio. Parse only: what the store does with the result is ``bench/ingest.py``'s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import make_batches
from gpuwatch import wire
from gpuwatch.gc_tuning import DAEMON_THRESHOLDS, settle
from gpuwatch.wire import v2 as wire_v2


def timed(parse: Any, body: bytes, repeat: int) -> float:
    t0 = time.perf_counter()
    for _ in range(repeat):
        parse(body)
    return (time.perf_counter() - t0) / repeat


def by_kind(batch: wire.Batch) -> list:
    """The samples grouped by kind, each kind in its order (v2 groups them so)."""
    return sorted(batch.samples, key=lambda s: list(wire.SAMPLE_KINDS).index(s.kind))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", default="1,30", help="comma-separated cycles per batch")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--repeat", type=int, default=20, help="parses per round and format")
    args = ap.parse_args()
    settle(DAEMON_THRESHOLDS)  # the daemon's GC settings: parsing makes many objects
    for cycles in (int(c) for c in args.cycles.split(",")):
        (batch,) = make_batches(1, cycles, args.gpus, timedelta(0), per_batch=cycles)
        bodies = {1: wire_v2.encode(batch, 1), 2: wire_v2.encode(batch, 2)}
        assert wire_v2.decode(bodies[2]).samples == by_kind(batch), "v2 must hold exactly the same samples"
        models = {1: wire.Batch, 2: wire_v2.ColumnarBatch}
        results: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(args.rounds):  # interleaved: this machine's speed drifts
            for version, body in bodies.items():
                results[version].append(timed(models[version].model_validate_json, body, args.repeat))
        n = cycles * args.gpus
        print(
            f"{cycles} cycle(s) per batch: {n} GPU-samples + {len(batch.samples) - n} host samples; medians:"
        )
        base = statistics.median(results[1])
        for version, times in results.items():
            seconds = statistics.median(times)
            size = len(bodies[version])
            print(
                f"  v{version}: {size:>7,} B JSON ({size / len(bodies[1]):.2f} of v1), "
                f"{seconds * 1e6:,.0f} us per batch = {seconds / n * 1e6:.2f} us per GPU-sample "
                f"(parse only); {seconds / base:.2f} of v1"
            )


if __name__ == "__main__":
    main()
