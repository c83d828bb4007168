"""How far today's row layout is from a packed one: load rate and bytes per GPU-sample.

    .venv/bin/python bench/packed_layout.py [--nodes 40] [--batches-per-node 4] [--cycles 30] [--rounds 3]
    .venv/bin/python bench/packed_layout.py --cycles 1 --batches-per-node 60   # one-cycle batches
    .venv/bin/python bench/packed_layout.py --cycles 18 --realistic [--toast-target 128] [--lz4]

A question for the 100k GPU-samples/s goal (``docs/scaling.md``), not a code path of gpuwatch. Makes a
throwaway database (127.0.0.1:5432 or $GPUWATCH_BENCH_PG) and, in interleaved rounds, loads
the same realistic batches (``bench/ingest.py``'s: 8 GPUs with 2 processes each per cycle):

* ``rows``: the layout of a row per GPU sample (``row_gpu_samples``, created here: gpuwatch
  stored GPU samples so before migration 0022) and the batch's ``gpu_process_packs`` row by raw
  COPY in one transaction (the physical limit ``bench/ingest.py`` compares with);
* ``gpuwatch``: the layout gpuwatch stores — the batch's ``gpu_sample_packs`` and
  ``gpu_process_packs`` rows (``daemon/store/packing.py``) by the same raw COPY;
* ``packed``: a sketch table with ONE row per (node, GPU, batch) and one array per metric, the
  GPU's processes as arrays too, built from the same wire models with ``daemon/store/pg_arrays.py`` and
  loaded the same way (binary COPY, one transaction: each layout's physical limit);
* ``node-cycle``: one row per (node, cycle) whatever the batching, every GPU metric an array
  over the node's GPUs and the processes arrays with their GPU index: the unit that still
  packs when agents send one-cycle batches (they do, bundled), where a row per
  (node, GPU, batch) is a row per sample again;
* ``compact``: ``packed`` with each metric in the narrowest type that holds what NVML gives
  (``real`` for ratios, watts, clocks and rates: 4 bytes; the energy counter stays ``float8``),
  the stamps as offsets in ms from the first, a metric with one value over the whole pack
  stored once (a 1-element array: limits, totals, the max clocks) and one with none as NULL;
  ``--toast-target`` sets its ``toast_tuple_target`` and ``--lz4`` its columns' compression;
* ``node-batch``: ``compact``'s types, ONE row per (node, batch) for every GPU and cycle in it,
  with the GPU index an array too: a PostgreSQL array costs 20-some bytes of header, which a
  row per GPU pays per metric for a batch's 18 values, a row per node-batch for 8 x 18.

PostgreSQL compresses a row's arrays only until the row fits ``toast_tuple_target`` (2 KB by
default), so the bytes per GPU-sample of a packed row fall with the cycles per batch whatever
the values hold. ``--realistic`` gives the GPUs values that change as a training job's do
(utilization in whole percent around 95 %, power in mW, temperature, clocks, the energy
counter rising, GPM ratios, PCIe and NVLink rates with noise) instead of the same values every
cycle, which compress far better than real ones.

Prints, for each, the load rate in GPU-samples/s (each with its processes; the rows built
beforehand, so this is the database's side), the Python time to build the rows from the
wire models per batch, and bytes per GPU-sample (heap + indexes + TOAST after VACUUM). Host
samples are left out of all three.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from operator import itemgetter
from pathlib import Path

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import (
    copy_into,
    copy_table,
    copy_values,
    drop_db,
    fresh_db,
    make_batches,
    register,
)
from bench.realistic import realistic
from gpuwatch import wire
from gpuwatch.daemon.store import pg_arrays
from gpuwatch.daemon.store.batch_store import BatchStore, sample_rows
from gpuwatch.daemon.store.columns import PROCESS_FIELDS as _PROCESS_NAMES
from gpuwatch.daemon.store.pg_copy import copy_type
from gpuwatch.sql.schema import GPU_SAMPLE_FIELDS, gpu_process_packs, gpu_sample_packs

_PG = postgresql.dialect()
#: a row per GPU sample: the layout before packing, the baseline here
gpu_samples = sa.Table(
    "row_gpu_samples",
    sa.MetaData(),
    sa.Column("node_id", sa.Integer, primary_key=True),
    sa.Column("gpu_index", sa.SmallInteger, primary_key=True),
    sa.Column("ts", sa.DateTime(timezone=True), primary_key=True),
    *(sa.Column(f.name, f.read_as) for f in GPU_SAMPLE_FIELDS),
)
_KEYS = ("node_id", "gpu_index", "ts")
METRICS = [c for c in gpu_samples.c if c.name not in _KEYS]
PROCESS_FIELDS = [gpu_process_packs.c[name] for name in _PROCESS_NAMES]


def _type(column: sa.Column) -> str:
    """The column's type on PostgreSQL; for the pack table's array columns, their element's. A
    sketch keeps a JSON column's values as their JSON text (an array of JSON lists would be a
    two-dimensional array, which an empty list cannot be part of)."""
    sql_type = column.type.compile(dialect=_PG).removesuffix("[]")
    return "TEXT" if sql_type == "JSONB" else sql_type


_JSON_METRICS = {
    i for i, c in enumerate(c for c in gpu_samples.c if c.name not in _KEYS) if _type(c) == "TEXT"
}


def _metric_values(sample: wire.GpuSample) -> list:
    """A sample's metrics in :data:`METRICS` order, JSON ones as their text."""
    values = list(_read_metrics(vars(sample)))
    for i in _JSON_METRICS:
        if values[i] is not None:
            values[i] = json.dumps(values[i])
    return values


#: a sketch table: (name, [(column, PostgreSQL type)])
Sketch = tuple[str, list[tuple[str, str]]]


def create_packed_table(conn: psycopg.Connection) -> Sketch:
    """The (node, GPU, batch) sketch table."""
    columns = [
        ("node_id", "INTEGER"),
        ("gpu_index", "SMALLINT"),
        ("ts", "TIMESTAMP WITH TIME ZONE[]"),
        *((c.name, _type(c) + "[]") for c in METRICS),
        ("proc_sample", "INTEGER[]"),  # index into ts of each process row
        *((f"proc_{c.name}", _type(c) + "[]") for c in PROCESS_FIELDS),
        ("first_ts", "TIMESTAMP WITH TIME ZONE"),
    ]
    body = ", ".join(
        f'"{name}" {sql_type} NOT NULL' if name == "first_ts" else f'"{name}" {sql_type}'
        for name, sql_type in columns
    )
    conn.execute(f"CREATE TABLE packed_gpu ({body}, PRIMARY KEY (node_id, gpu_index, first_ts))")
    return "packed_gpu", columns


_read_metrics = itemgetter(*(c.name for c in METRICS))
_read_process = itemgetter(*(c.name for c in PROCESS_FIELDS))


def _arrays(
    samples: list[wire.GpuSample], owner: Callable[[int, wire.GpuSample], int]
) -> tuple[list[list], list[int], list[list]]:
    """``samples``' metrics as one binary array per column; their processes likewise, with
    ``owner(i, sample)`` for each process (which sample, or which GPU, it belongs to)."""
    metric_columns = zip(*map(_metric_values, samples), strict=True)
    procs = [(owner(i, s), p) for i, s in enumerate(samples) for p in s.processes or ()]
    process_columns = (
        zip(*(_read_process(vars(p)) for _, p in procs), strict=True) if procs else [()] * len(PROCESS_FIELDS)
    )
    return (
        [pg_arrays.array_type(_type(c))(v) for c, v in zip(METRICS, metric_columns, strict=True)],
        [o for o, _ in procs],
        [pg_arrays.array_type(_type(c))(v) for c, v in zip(PROCESS_FIELDS, process_columns, strict=True)],
    )


def packed_rows(node_id: int, batch: wire.Batch) -> list[list]:
    """One row per GPU of the batch: its samples' metrics and processes as arrays."""
    per_gpu: dict[int, list[wire.GpuSample]] = {}
    for sample in batch.samples:
        if isinstance(sample, wire.GpuSample):
            per_gpu.setdefault(sample.gpu_index, []).append(sample)
    rows = []
    for gpu_index, samples in per_gpu.items():
        metrics, proc_sample, processes = _arrays(samples, lambda i, _: i)
        stamps = [s.ts for s in samples]
        rows.append(
            [
                node_id,
                gpu_index,
                pg_arrays.TimestamptzArray(stamps),
                *metrics,
                pg_arrays.Int4Array(proc_sample),
                *processes,
                min(stamps),
            ]
        )
    return rows


#: ``compact``'s type per metric: the narrowest that holds what NVML gives
_COMPACT_TYPE = {"DOUBLE PRECISION": "REAL"}
_COMPACT_KEEP = {
    "energy_joules": "DOUBLE PRECISION"
}  # a counter of joules since driver load: float4 would round it


def _compact_type(column: sa.Column) -> str:
    sql_type = _type(column)
    return _COMPACT_KEEP.get(column.name, _COMPACT_TYPE.get(sql_type, sql_type))


def create_compact_table(conn: psycopg.Connection, toast_target: int | None, lz4: bool) -> Sketch:
    """The (node, GPU, batch) sketch table in narrow types, constants once, no all-NULL arrays."""
    columns = [
        ("node_id", "INTEGER"),
        ("gpu_index", "SMALLINT"),
        ("first_ts", "TIMESTAMP WITH TIME ZONE"),
        ("ts_offset_ms", "INTEGER[]"),
        *((c.name, _compact_type(c) + "[]") for c in METRICS),
        ("proc_sample", "SMALLINT[]"),
        *((f"proc_{c.name}", _compact_type(c) + "[]") for c in PROCESS_FIELDS),
    ]
    compression = " COMPRESSION lz4" if lz4 else ""
    body = ", ".join(
        f'"{name}" {sql_type}{compression if sql_type.endswith("[]") else ""}' for name, sql_type in columns
    )
    options = f" WITH (toast_tuple_target = {toast_target})" if toast_target else ""
    conn.execute(f"CREATE TABLE compact_gpu ({body}, PRIMARY KEY (node_id, gpu_index, first_ts)){options}")
    return "compact_gpu", columns


def _folded(values: list) -> list | None:
    """A metric's values over a pack: once when they are all the same, NULL when all absent."""
    first = values[0]
    if all(v == first for v in values):
        return None if first is None else [first]
    return values


_COMPACT_ARRAYS = [pg_arrays.array_type(_compact_type(c)) for c in METRICS]


def compact_rows(node_id: int, batch: wire.Batch) -> list[list]:
    """One row per GPU of the batch, as :func:`packed_rows`, in ``compact``'s layout."""
    per_gpu: dict[int, list[wire.GpuSample]] = {}
    for sample in batch.samples:
        if isinstance(sample, wire.GpuSample):
            per_gpu.setdefault(sample.gpu_index, []).append(sample)
    return [[node_id, gpu_index, *_compact_arrays(samples)] for gpu_index, samples in per_gpu.items()]


def node_batch_rows(node_id: int, batch: wire.Batch) -> list[list]:
    """ONE row for the batch's GPU samples, every GPU and cycle, in ``compact``'s types."""
    samples = [s for s in batch.samples if isinstance(s, wire.GpuSample)]
    first, offsets, *rest = _compact_arrays(samples)
    return [[node_id, first, pg_arrays.Int2Array(s.gpu_index for s in samples), offsets, *rest]]


def _compact_arrays(samples: list[wire.GpuSample]) -> list:
    """first stamp, offsets, the metrics (folded) and the processes of ``samples``."""
    first = min(s.ts for s in samples)
    offsets = [round((s.ts - first).total_seconds() * 1000) for s in samples]
    metrics = []
    for array, values in zip(_COMPACT_ARRAYS, zip(*map(_metric_values, samples), strict=True), strict=True):
        folded = _folded(list(values))
        metrics.append(None if folded is None else array(folded))
    procs = [(i, p) for i, s in enumerate(samples) for p in s.processes or ()]
    process_columns = (
        zip(*(_read_process(vars(p)) for _, p in procs), strict=True) if procs else [()] * len(PROCESS_FIELDS)
    )
    processes = [
        pg_arrays.array_type(_type(c))(v) for c, v in zip(PROCESS_FIELDS, process_columns, strict=True)
    ]
    return [
        first,
        pg_arrays.Int4Array(offsets),
        *metrics,
        pg_arrays.Int2Array(i for i, _ in procs),
        *processes,
    ]


def _create(conn: psycopg.Connection, name: str, columns: list[tuple[str, str]], key: str) -> Sketch:
    """CREATE TABLE ``name`` of ``columns`` with primary key ``key``; the sketch it is."""
    body = ", ".join(f'"{column}" {sql_type}' for column, sql_type in columns)
    conn.execute(f"CREATE TABLE {name} ({body}, PRIMARY KEY ({key}))")
    return name, columns


def create_node_batch_table(conn: psycopg.Connection) -> Sketch:
    """The (node, batch) sketch table in ``compact``'s types: every GPU of the batch in one row."""
    columns = [
        ("node_id", "INTEGER"),
        ("first_ts", "TIMESTAMP WITH TIME ZONE"),
        ("gpu_index", "SMALLINT[]"),
        ("ts_offset_ms", "INTEGER[]"),
        *((c.name, _compact_type(c) + "[]") for c in METRICS),
        ("proc_sample", "SMALLINT[]"),
        *((f"proc_{c.name}", _compact_type(c) + "[]") for c in PROCESS_FIELDS),
    ]
    return _create(conn, "node_batch", columns, "node_id, first_ts")


def create_node_cycle_table(conn: psycopg.Connection) -> Sketch:
    """The (node, cycle) sketch table."""
    columns = [
        ("node_id", "INTEGER"),
        ("ts", "TIMESTAMP WITH TIME ZONE"),
        ("gpu_index", "SMALLINT[]"),
        *((c.name, _type(c) + "[]") for c in METRICS),
        ("proc_gpu_index", "SMALLINT[]"),
        *((f"proc_{c.name}", _type(c) + "[]") for c in PROCESS_FIELDS),
    ]
    return _create(conn, "node_cycle", columns, "node_id, ts")


def node_cycle_rows(node_id: int, batch: wire.Batch) -> list[list]:
    """One row per stamp of the batch: its GPUs' metrics and processes as arrays over GPUs."""
    per_ts: dict[object, list[wire.GpuSample]] = {}
    for sample in batch.samples:
        if isinstance(sample, wire.GpuSample):
            per_ts.setdefault(sample.ts, []).append(sample)
    rows = []
    for ts, samples in per_ts.items():
        metrics, proc_gpu, processes = _arrays(samples, lambda _, s: s.gpu_index)
        gpus = pg_arrays.Int2Array(s.gpu_index for s in samples)
        rows.append([node_id, ts, gpus, *metrics, pg_arrays.Int2Array(proc_gpu), *processes])
    return rows


def _copy_type(sql_type: str) -> str:
    """:func:`copy_type`, and ``real`` (which no gpuwatch table has yet) as ``float4``."""
    if sql_type.removesuffix("[]") == "REAL":
        return "float4" + ("[]" if sql_type.endswith("[]") else "")
    return copy_type(sql_type)


def load_sketch(
    conn: psycopg.Connection,
    sketch: Sketch,
    make_rows: Callable[[int, wire.Batch], list[list]],
    batches: list[wire.Batch],
    ids: dict[str, int],
) -> tuple[float, float]:
    """(seconds building a sketch table's rows from the wire models, seconds loading them by
    binary COPY in one transaction: the same loader as today's rows get)."""
    name, columns = sketch
    conn.execute(f"TRUNCATE {name}")
    conn.commit()
    started = time.perf_counter()
    rows = [row for batch in batches for row in make_rows(ids[batch.node], batch)]
    built = time.perf_counter()
    with conn.cursor() as cur:
        copy_into(cur, name, [c for c, _ in columns], [_copy_type(t) for _, t in columns], rows)
    conn.commit()
    return built - started, time.perf_counter() - built


def load_rows(
    conn: psycopg.Connection, batches: list[wire.Batch], ids: dict[str, int], packed: bool
) -> tuple[float, float]:
    """(seconds building the GPU and process rows, seconds COPYing them (binary) in one
    transaction): a row per GPU sample, or gpuwatch's packs for ``packed``."""
    gpu_table = gpu_sample_packs if packed else gpu_samples
    conn.execute(f"TRUNCATE {gpu_table.name}, gpu_process_packs")
    conn.commit()
    started = time.perf_counter()
    tables = {t.name: t for t in (gpu_table, gpu_process_packs)}
    rows: dict[str, list[list]] = {name: [] for name in tables}
    for batch in batches:
        node_id = ids[batch.node]
        for name, table_rows in sample_rows(node_id, batch).items():
            if name in tables:
                rows[name] += [copy_values(tables[name], r) for r in table_rows]
        if not packed:
            rows[gpu_table.name] += [
                [node_id, *(getattr(s, c.name) for c in list(gpu_table.c)[1:])]
                for s in batch.samples
                if isinstance(s, wire.GpuSample)
            ]
    built = time.perf_counter()
    with conn.cursor() as cur:
        for name, table_rows in rows.items():
            copy_table(cur, tables[name], table_rows)
    conn.commit()
    return built - started, time.perf_counter() - built


def bytes_of(conn: psycopg.Connection, tables: list[str]) -> int:
    conn.commit()
    conn.autocommit = True
    conn.execute("VACUUM ANALYZE")
    conn.autocommit = False
    total = 0
    for table in tables:
        parts = conn.execute(
            "SELECT c.oid::regclass::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [table],
        ).fetchall()
        for (name,) in parts or [(table,)]:
            total += conn.execute("SELECT pg_total_relation_size(%s::regclass)", [name]).fetchone()[0]
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=40)
    ap.add_argument("--batches-per-node", type=int, default=4)
    ap.add_argument("--cycles", type=int, default=30, help="cycles per batch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--realistic", action="store_true", help="GPU values that move as a training job's do")
    ap.add_argument("--toast-target", type=int, default=None, help="compact's toast_tuple_target (128..8160)")
    ap.add_argument("--lz4", action="store_true", help="compact's arrays compressed with lz4")
    args = ap.parse_args()
    batches = make_batches(
        args.nodes, args.batches_per_node * args.cycles, 8, timedelta(0), per_batch=args.cycles
    )
    if args.realistic:
        batches = realistic(batches)
    gpu_samples_n = sum(1 for b in batches for s in b.samples if s.kind == "gpu")
    name, url, engine = fresh_db()
    try:
        ids = register(engine, BatchStore(engine), batches)
        gpu_samples.create(engine)
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            packed = create_packed_table(conn)
            node_cycle = create_node_cycle_table(conn)
            compact = create_compact_table(conn, args.toast_target, args.lz4)
            node_batch = create_node_batch_table(conn)
            conn.commit()
            timings: dict[str, list[tuple[float, float]]] = {
                "rows (raw COPY)": [],
                "gpuwatch": [],
                "packed": [],
                "node-cycle": [],
                "compact": [],
                "node-batch": [],
            }
            for _ in range(args.rounds):
                timings["rows (raw COPY)"].append(load_rows(conn, batches, ids, packed=False))
                timings["gpuwatch"].append(load_rows(conn, batches, ids, packed=True))
                timings["packed"].append(load_sketch(conn, packed, packed_rows, batches, ids))
                timings["node-cycle"].append(load_sketch(conn, node_cycle, node_cycle_rows, batches, ids))
                timings["compact"].append(load_sketch(conn, compact, compact_rows, batches, ids))
                timings["node-batch"].append(load_sketch(conn, node_batch, node_batch_rows, batches, ids))
            sizes = {
                "rows (raw COPY)": bytes_of(conn, ["row_gpu_samples", "gpu_process_packs"]),
                "gpuwatch": bytes_of(conn, ["gpu_sample_packs", "gpu_process_packs"]),
                "packed": bytes_of(conn, ["packed_gpu"]),
                "node-cycle": bytes_of(conn, ["node_cycle"]),
                "compact": bytes_of(conn, ["compact_gpu"]),
                "node-batch": bytes_of(conn, ["node_batch"]),
            }
    finally:
        engine.dispose()
        drop_db(name)
    print(f"{len(batches)} batches of {args.cycles} cycles, {gpu_samples_n} GPU samples (2 processes each)")
    load_rate = {}
    for layout, runs in timings.items():
        build_ms = statistics.median(b for b, _ in runs) / len(batches) * 1000
        load_rate[layout] = statistics.median(gpu_samples_n / load for _, load in runs)
        rounds = ", ".join(f"{gpu_samples_n / load:,.0f}" for _, load in runs)
        print(
            f"  {layout:>16}: load {load_rate[layout]:>9,.0f} GPU-samples/s (rows built beforehand; "
            f"rounds {rounds}); building them {build_ms:.2f} ms per batch in Python; "
            f"{sizes[layout] / gpu_samples_n:,.0f} B per GPU-sample"
        )
    for layout in ("gpuwatch", "packed", "node-cycle", "compact", "node-batch"):
        ratio = load_rate[layout] / load_rate["rows (raw COPY)"]
        shrink = sizes["rows (raw COPY)"] / sizes[layout]
        print(f"{layout} / rows: {ratio:.2f}x the load rate, {shrink:.1f}x less disk")


if __name__ == "__main__":
    main()
