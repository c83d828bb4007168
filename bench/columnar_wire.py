"""What a columnar wire format would save the daemon: parsing one batch's GPU samples.

    .venv/bin/python bench/columnar_wire.py [--cycles 30] [--gpus 8] [--rounds 15]

Today's wire format (v1) sends one JSON object per GPU per cycle; the daemon validates each
into a pydantic model (``wire.GpuSample``, with its ``GpuProcess`` models). A columnar
format would send one object per GPU per batch with an array per field. This builds both
encodings of the same samples (``bench/ingest.py``'s realistic batch: 8 GPUs with 2
processes each), the columnar model generated from ``GpuSample`` itself (every per-sample
field becomes a list of the same type and constraints; identity fields stay scalar), checks
that the columnar JSON holds exactly the same values, then times
``model_validate_json`` of each, interleaved, and prints medians per GPU-sample and their
ratio. A design input for a wire format v2 (docs/scaling.md), not product code.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, create_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import make_batches
from gpuwatch import wire
from gpuwatch.gc_tuning import DAEMON_THRESHOLDS, settle

#: fields of one GPU that do not change within a batch: sent once per GPU
IDENTITY = ("gpu_index", "uuid", "name", "pci_bus_id", "simulated")


_STRICT = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _as_lists(model: type[BaseModel], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``model``'s fields as lists of the same type; constraints (ge/le) kept per element."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        element = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        fields[name] = (list[element], ...)
    return fields


def columnar_model(process_arrays: bool) -> type[BaseModel]:
    """``GpuSample`` with every per-sample field a list; identity fields scalar. Processes
    stay models per cycle or, with ``process_arrays``, become arrays with a cycle index."""
    fields: dict[str, Any] = {"ts": (list[datetime], ...)}
    for name in IDENTITY:
        info = wire.GpuSample.model_fields[name]
        fields[name] = (info.annotation, info)
    fields.update(_as_lists(wire.GpuSample, skip=("kind", "ts", *IDENTITY)))
    if process_arrays:
        arrays = _as_lists(wire.GpuProcess)
        procs = create_model("ProcessArrays", __config__=_STRICT, cycle=(list[int], ...), **arrays)
        fields["processes"] = (procs, ...)
    series = create_model("GpuSeries", __config__=_STRICT, **fields)
    return create_model("ColumnarGpuBatch", __config__=_STRICT, node=(str, ...), gpus=(list[series], ...))


def columnar_json(batch: wire.Batch, process_arrays: bool) -> bytes:
    """The batch's GPU samples, one object per GPU with an array per field."""
    per_gpu: dict[int, list[wire.GpuSample]] = {}
    for s in batch.samples:
        if isinstance(s, wire.GpuSample):
            per_gpu.setdefault(s.gpu_index, []).append(s)
    gpus = []
    for samples in per_gpu.values():
        docs = [s.model_dump(mode="json") for s in samples]
        gpu: dict[str, Any] = {name: docs[0][name] for name in IDENTITY}
        for name in docs[0]:
            if name not in IDENTITY and name != "kind":
                gpu[name] = [d[name] for d in docs]
        if process_arrays:
            flat = [(i, p) for i, d in enumerate(docs) for p in d["processes"] or ()]
            names = list(wire.GpuProcess.model_fields)
            gpu["processes"] = {"cycle": [i for i, _ in flat], **{k: [p[k] for _, p in flat] for k in names}}
        gpus.append(gpu)
    return json.dumps({"node": batch.node, "gpus": gpus}).encode()


def rows_json(batch: wire.Batch) -> bytes:
    """The same GPU samples as today's wire format (a v1 batch of GPU samples only)."""
    gpu_only = [s for s in batch.samples if isinstance(s, wire.GpuSample)]
    return batch.model_copy(update={"samples": gpu_only}).model_dump_json().encode()


def same_values(rows: bytes, columns: bytes, model: type[BaseModel]) -> bool:
    """Whether the columnar parse holds exactly the samples the row parse does."""
    today = wire.Batch.model_validate_json(rows)
    series = model.model_validate_json(columns)
    rebuilt = []
    for gpu in series.gpus:  # type: ignore[attr-defined]
        data = gpu.model_dump()
        procs = data["processes"]
        for i in range(len(data["ts"])):
            one = {k: (v if k in IDENTITY else v[i]) for k, v in data.items() if k != "processes"}
            if isinstance(procs, dict):  # arrays: the rows whose cycle is i
                rows_i = [j for j, c in enumerate(procs["cycle"]) if c == i]
                one["processes"] = [{k: procs[k][j] for k in procs if k != "cycle"} for j in rows_i] or None
            else:
                one["processes"] = procs[i]
            rebuilt.append(wire.GpuSample(**one))
    key = lambda s: (s.gpu_index, s.ts)  # noqa: E731
    return sorted(today.samples, key=key) == sorted(rebuilt, key=key)


def timed(parse: Any, body: bytes, repeat: int) -> float:
    t0 = time.perf_counter()
    for _ in range(repeat):
        parse(body)
    return (time.perf_counter() - t0) / repeat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=30, help="cycles per batch")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--repeat", type=int, default=20, help="parses per round and encoding")
    args = ap.parse_args()
    settle(DAEMON_THRESHOLDS)  # the daemon's GC settings: parsing makes many objects
    (batch,) = make_batches(1, args.cycles, args.gpus, timedelta(0), per_batch=args.cycles)
    rows = rows_json(batch)
    encodings = {"rows (v1)": (wire.Batch, rows)}
    for label, arrays in (("columnar", False), ("columnar+procs", True)):
        model, body = columnar_model(arrays), columnar_json(batch, arrays)
        assert same_values(rows, body, model), f"{label} must hold exactly the same samples"
        encodings[label] = (model, body)
    n = args.cycles * args.gpus
    results: dict[str, list[float]] = {label: [] for label in encodings}
    for _ in range(args.rounds):  # interleaved: this machine's speed drifts
        for label, (model, body) in encodings.items():
            results[label].append(timed(model.model_validate_json, body, args.repeat))
    print(f"{n} GPU-samples ({args.gpus} GPUs x {args.cycles} cycles, 2 processes each); medians:")
    base = statistics.median(results["rows (v1)"])
    for label, times in results.items():
        seconds = statistics.median(times)
        print(
            f"  {label:>14}: {len(encodings[label][1]):>7,} B JSON, {seconds * 1000:.2f} ms per batch = "
            f"{seconds / n * 1e6:.2f} us per GPU-sample = {n / seconds:,.0f} GPU-samples per CPU-second "
            f"(parse only); {seconds / base:.2f} of rows"
        )


if __name__ == "__main__":
    main()
