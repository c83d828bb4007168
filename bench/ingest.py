"""Ingest rate into PostgreSQL: raw COPY (the physical limit), the store path, the HTTP path.

    .venv/bin/python bench/ingest.py [--nodes 50] [--cycles 20] [--gpus 8] [--per-batch 1]
                                     [--clients 32] [--workers 2] [--bundle 6,30] [--rounds 3]
                                     [--skip insert] [--wire 1,2] [--merge 30]
                                     [--steady] [--baseline TREE]

Makes a throwaway database on the server at 127.0.0.1:5432 (or $GPUWATCH_BENCH_PG), then
for each mode stores the same realistic batches (one batch = ``--per-batch`` 10 s cycles of
one node: 8 GPU samples with 2 processes each + host samples) and prints samples/s. Modes
run in interleaved rounds; the medians are compared with raw COPY. Modes: ``raw-copy`` (the
rows, already made, binary-COPYed in one transaction), ``raw-copy gpu`` (the same, GPU and
process rows only: what the eight host rows per node-cycle cost), ``insert`` and ``unnest`` (``BatchStore``
with that bulk mode, one batch per call), ``http`` and ``http xN`` (a real ``gpuwatch
daemon`` process, 1 or N concurrent clients; includes JSON parsing, validation, auth and
group commit; prints the daemon's own CPU per batch), and ``http xN wW`` (the same with
``daemon.workers = W`` processes) and, with ``--bundle K[,K...]``, ``http xN bK`` (K
consecutive batches of a node per bundle request, as an agent replays its spool backlog or
sends with ``agent.push_every = K``). With ``--compare-http``, each ``http`` mode also runs
as ``... py``: the daemon on uvicorn's pure-Python stack (``daemon.http_parser = "h11"``,
``daemon.event_loop = "asyncio"``, what it ran on before httptools and uvloop were
dependencies), side by side. With ``--wire 1,2`` each ``http`` mode also runs as ``... v2``:
the same batches in wire format v2 (columns, ``gpuwatch/wire/v2.py``) to ``/api/v2/ingest``.
With ``--merge K[,K...]``, ``http xN mK``: K consecutive one-cycle batches of a node merged
into ONE v2 batch by the agent's own code (``gpuwatch/agent/merge.py``), one per request, as
an agent sends its spool backlog (or ``agent.push_every = K``) with ``agent.merge_backlog``,
and ``http xN wW mK`` the same against ``daemon.workers = W`` when ``--workers`` W > 1.
``--steady`` adds ``http xN mK``
with K = ``agent.push_every``'s default (what every agent sends in steady state) and prints its
ratio to raw COPY, per round and of the medians. ``--baseline TREE`` runs each http mode a
second time as ``... base``, against the daemon of another source tree (``git archive <commit> |
tar -x -C TREE``), side by side: an A/B of a daemon change in one run.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.agent_vs_node_exporter import tree_cpu_seconds
from gpuwatch import wire
from gpuwatch.agent import merge
from gpuwatch.clock import utcnow
from gpuwatch.config.settings import AgentConfig
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.daemon.store.pg_copy import copy_rows
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.schema import ingested_batches
from gpuwatch.wire import v2 as wire_v2
from tests import factories

#: ``agent.push_every``'s default: the cycles an agent merges into one request in steady state
DEFAULT_PUSH_EVERY: int = AgentConfig.model_fields["push_every"].default

ADMIN = os.environ.get("GPUWATCH_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def make_batches(
    nodes: int, cycles: int, gpus: int, shift: timedelta, per_batch: int = 1
) -> list[wire.Batch]:
    """``per_batch`` cycles of one node in each batch (1 = the agent's normal push)."""
    start = utcnow() - timedelta(hours=1) + shift
    out = []
    for c0 in range(0, cycles, per_batch):
        for n in range(nodes):
            samples = []
            for c in range(c0, min(c0 + per_batch, cycles)):
                samples += _cycle(start + timedelta(seconds=10 * c), gpus)
            out.append(wire.Batch(node=f"bench{n:04d}", agent_version="bench", seq=c0, samples=samples))
    return out


def _cycle(ts, gpus: int) -> list:
    samples = [
        factories.gpu_sample(
            ts,
            i,
            util=0.5,
            processes=[
                wire.GpuProcess(pid=1000 + i, used_memory_bytes=2**30, job_id="77"),
                wire.GpuProcess(pid=2000 + i, used_memory_bytes=2**29, job_id="77"),
            ],
        )
        for i in range(gpus)
    ]
    return samples + factories.host_samples(ts)


def fresh_db() -> tuple[str, str, sa.Engine]:
    name = f"gpuwatch_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = sa.engine.make_url(ADMIN).set(database=name).render_as_string(hide_password=False)
    engine = create_engine(url)
    migrate.upgrade(engine)
    return name, url, engine


def drop_db(name: str) -> None:
    admin = sa.create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def fill_in_sql(engine: sa.Engine, statements: list[str], params: dict) -> int:
    """Run a bench's fill ``statements`` (``generate_series`` inserts) in one transaction, then
    VACUUM ANALYZE, so the planner sees the filled tables; the ``gpu_minutes`` rows there are."""
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(sa.text(statement), params)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE"))
        return conn.execute(sa.text("SELECT count(*) FROM gpu_minutes")).scalar_one()


def register(engine: sa.Engine, store: BatchStore, batches: list[wire.Batch]) -> dict[str, int]:
    """Each batch's node registered (a token made) and its days' partitions made; name -> id."""
    ids: dict[str, int] = {}
    for b in batches:
        if b.node not in ids:
            create_token(engine, b.node)
            with engine.connect() as conn:
                ids[b.node] = get_node(conn, b.node).id
    store.partitions.ensure_days(d for b in batches for d in {s.ts.date() for s in b.samples})
    return ids


def bench_store(engine: sa.Engine, batches: list[wire.Batch], mode: str) -> tuple[float, list[float]]:
    store = BatchStore(engine, bulk=mode)
    ids = register(engine, store, batches)
    latencies = []
    t0 = time.perf_counter()
    for b in batches:
        t = time.perf_counter()
        store.store(ids[b.node], b)
        latencies.append(time.perf_counter() - t)
    return time.perf_counter() - t0, latencies


def copy_values(table: sa.Table, row: dict) -> list:
    """A ``sample_rows`` row as the value list a binary COPY of ``table`` writes."""
    return [row.get(column.name) for column in table.c]


def copy_into(
    cur: psycopg.Cursor, table: str, columns: list[str], types: list[str], value_rows: list[list]
) -> None:
    """``value_rows`` into ``table`` by binary COPY: the fastest way PostgreSQL loads rows (a
    text COPY formats every array element as text in Python, and the server parses it back)."""
    quoted = ", ".join(f'"{name}"' for name in columns)
    with cur.copy(f'COPY "{table}" ({quoted}) FROM STDIN (FORMAT BINARY)') as copy:
        copy.set_types(types)
        for row in value_rows:
            copy.write_row(row)


def copy_table(cur: psycopg.Cursor, table: sa.Table, value_rows: list[list]) -> None:
    """``value_rows`` (``copy_values``) into ``table`` by binary COPY, as the store's COPY does."""
    copy_rows(cur, table, value_rows)


def postgres_cpu_seconds(engine: sa.Engine) -> float | None:
    """CPU seconds of the PostgreSQL server's processes (the postmaster and its live children:
    the backends of the pools in use); None if its data directory is not readable here."""
    try:
        with engine.connect() as conn:
            data_dir = conn.execute(sa.text("SHOW data_directory")).scalar()
        postmaster = int(Path(data_dir, "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, sa.exc.DBAPIError):
        return None
    return tree_cpu_seconds(postmaster)


def _server_cpu(before: float | None, engine: sa.Engine, cycles: int) -> str:
    after = postgres_cpu_seconds(engine)
    if before is None or after is None:
        return ""
    return f"; PostgreSQL CPU {1000 * (after - before) / cycles:.3f} ms per cycle"


def bench_raw_copy(
    engine: sa.Engine, batches: list[wire.Batch], gpu_only: bool = False
) -> tuple[float, list[float]]:
    """The physical limit: the same rows, already made, streamed by PostgreSQL binary COPY
    straight into their tables in one transaction — no HTTP, no validation, no idempotency, no
    conflict check. Timed from the rows (building them from the batches is not counted).
    ``gpu_only``: only the GPU and process rows, to see what the host rows cost."""
    from gpuwatch.daemon.store.batch_store import sample_rows
    from gpuwatch.sql.schema import PACK_TABLES, gpu_process_packs, gpu_sample_packs

    ids = register(engine, BatchStore(engine), batches)
    tables = {t.name: t for t in PACK_TABLES}
    merged: dict[str, list[list]] = {}
    for b in batches:
        for name, rows in sample_rows(ids[b.node], b).items():
            if gpu_only and tables[name] not in (gpu_sample_packs, gpu_process_packs):
                continue
            merged.setdefault(name, []).extend(copy_values(tables[name], row) for row in rows)
    t0 = time.perf_counter()
    with engine.begin() as conn:
        cpu0 = postgres_cpu_seconds(engine)  # after connecting: the backend is alive to count
        cur = conn.connection.dbapi_connection.cursor()
        for name, value_rows in merged.items():
            copy_table(cur, tables[name], value_rows)
    elapsed = time.perf_counter() - t0
    server = _server_cpu(cpu0, engine, len(batches))
    if server:
        print(f"               {server[2:]}")
    return elapsed, [elapsed / max(len(batches), 1)] * len(batches)


def http_requests(
    batches: list[wire.Batch], bundle: int, version: int = 1, merged: int = 1
) -> list[tuple[str, str, bytes, str]]:
    """(node, path, body, content type) per request: each batch alone, or ``bundle`` consecutive
    batches of one node per bundle request, one per line, as an agent replays its spool; the
    bodies in wire format ``version``, as the agent writes them (``wire_v2.encode``). With
    ``merged`` > 1, that many consecutive v2 batches of a node merged into one (the agent's
    ``merge``), one per request."""
    prefix = f"/api/v{version}/ingest/"
    if merged > 1:
        per_node_v2: dict[str, list[bytes]] = {}
        for b in batches:
            per_node_v2.setdefault(b.node, []).append(wire_v2.encode(b, 2))
        return [
            (
                node,
                f"/api/v2/ingest/{node}",
                merge.encode(merge.merge(merge.parse(bodies[i : i + merged]))),
                "application/json",
            )
            for node, bodies in per_node_v2.items()
            for i in range(0, len(bodies), merged)
        ]
    if bundle <= 1:
        return [(b.node, prefix + b.node, wire_v2.encode(b, version), "application/json") for b in batches]
    per_node: dict[str, list[bytes]] = {}
    for b in batches:
        per_node.setdefault(b.node, []).append(wire_v2.encode(b, version))
    out = []
    for node, bodies in per_node.items():
        for i in range(0, len(bodies), bundle):
            path = f"{prefix}{node}/bundle"
            out.append((node, path, b"\n".join(bodies[i : i + bundle]), "application/x-ndjson"))
    return out


def bench_http(
    db_url: str,
    engine: sa.Engine,
    batches: list[wire.Batch],
    clients: int,
    workers: int = 1,
    bundle: int = 1,
    pure_python: bool = False,
    version: int = 1,
    merged: int = 1,
    source: Path | None = None,
) -> tuple[float, list[float]]:
    """POST every batch to a real ``gpuwatch daemon`` process from ``clients`` threads at once,
    like many agents (the case group commit is for); with ``bundle`` > 1, as bundles of that
    many batches. Clients run in this process, the daemon in its own, so they do not share a
    GIL. Latencies are per request."""
    import tempfile
    import threading

    import requests

    from tests.daemon_process import DaemonProcess

    tokens = {b.node: create_token(engine, b.node) for b in batches}
    requests_ = http_requests(batches, bundle, version, merged)
    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GPUWATCH_DAEMON__WORKERS": str(workers)}
        if pure_python:
            env.update(GPUWATCH_DAEMON__HTTP_PARSER="h11", GPUWATCH_DAEMON__EVENT_LOOP="asyncio")
        daemon = DaemonProcess(db_url, Path(tmp) / "daemon.log", env=env, source=source)
        daemon.start()
        try:

            def client(part: list[tuple[str, str, bytes, str]]) -> None:
                with requests.Session() as http:
                    for node, path, body, content_type in part:
                        t = time.perf_counter()
                        r = http.post(
                            f"{daemon.url}{path}",
                            data=body,
                            headers={"Authorization": f"Bearer {tokens[node]}", "Content-Type": content_type},
                        )
                        r.raise_for_status()
                        if path.endswith("/bundle") and any(
                            x["status"] != "stored" for x in r.json()["results"]
                        ):
                            raise RuntimeError(f"bundle not stored: {r.text[:300]}")
                        latencies.append(time.perf_counter() - t)

            threads = [threading.Thread(target=client, args=(requests_[i::clients],)) for i in range(clients)]
            cpu0 = tree_cpu_seconds(daemon.proc.pid)
            server0 = postgres_cpu_seconds(engine)
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - t0
            daemon_cpu = tree_cpu_seconds(daemon.proc.pid) - cpu0
            server = _server_cpu(server0, engine, len(batches))
        finally:
            daemon.stop()
            log_text = (Path(tmp) / "daemon.log").read_text(errors="replace")
    # a failed group is stored again batch by batch: correct, but slow; say how often
    fallbacks = log_text.count("storing them one by one")
    if fallbacks:
        reasons = sorted(
            {
                line.split("failed (", 1)[1].split(")", 1)[0]
                for line in log_text.splitlines()
                if "storing them one by one" in line
            }
        )
        why = ", ".join(reasons)
        print(f"                {fallbacks} group(s) failed and were stored batch by batch ({why})")
    with engine.connect() as conn:
        groups = conn.execute(sa.select(sa.func.count(sa.distinct(ingested_batches.c.received_at)))).scalar()
        stored = conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar()
    samples = sum(len(b.samples) for b in batches)
    print(
        f"                {len(requests_)} requests; group commit: {stored} batches in {groups} "
        f"transactions; daemon CPU "
        f"{1000 * daemon_cpu / len(batches):.2f} ms per cycle = {samples / daemon_cpu:,.0f} samples per "
        f"daemon CPU-second (the clients share the machine: this is the daemon's own ceiling per core)"
        + server
    )
    return elapsed, latencies


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000 if len(values) > 2 else values[0] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--clients", type=int, default=32, help="concurrent HTTP clients in the last mode")
    ap.add_argument("--per-batch", type=int, default=1, help="cycles per batch (1 = normal agent push)")
    ap.add_argument(
        "--workers", type=int, default=2, help="daemon.workers of the extra last mode (1: no such mode)"
    )
    ap.add_argument(
        "--bundle",
        default="",
        help="comma-separated bundle sizes: a mode each, posting bundles of that many batches per "
        "request (an agent's backlog replay, or agent.push_every)",
    )
    ap.add_argument(
        "--wire",
        default="1",
        help="comma-separated wire formats the http modes post in (1, 2): with 1,2 each http mode "
        "also runs as '... v2', side by side",
    )
    ap.add_argument(
        "--merge",
        default="",
        help="comma-separated merge sizes: a mode each (and one with --workers W > 1), posting that "
        "many one-cycle batches of a node merged into one v2 batch per request (agent.merge_backlog)",
    )
    ap.add_argument(
        "--steady",
        action="store_true",
        help=f"add the mode of steady state at the default config (merged {DEFAULT_PUSH_EVERY}: "
        "agent.push_every's default, as agents send) and print its ratio to raw COPY per round",
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        help="a source tree of gpuwatch (e.g. git archive of another commit): each http mode also "
        "runs as '... base' with the daemon from that tree, side by side (A/B of a daemon change)",
    )
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of all modes; medians compared")
    ap.add_argument("--skip", default="", help="comma-separated modes to leave out, e.g. insert")
    ap.add_argument(
        "--compare-http",
        action="store_true",
        help="also run each http mode on uvicorn's pure-Python stack (h11, asyncio), suffix 'py'",
    )
    args = ap.parse_args()
    modes = ["raw-copy", "raw-copy gpu", "insert", "unnest", "http", f"http x{args.clients}"]
    if args.workers > 1:
        modes.append(f"http x{args.clients} w{args.workers}")
    for size in filter(None, args.bundle.split(",")):
        modes.append(f"http x{args.clients} b{int(size)}")
    modes = [m for m in modes if m not in set(args.skip.split(","))]
    if args.compare_http:
        modes = [twin for m in modes for twin in ((m, f"{m} py") if m.startswith("http") else (m,))]
    wires = [int(v) for v in args.wire.split(",")]
    modes = [f"{m} v{v}" if v != 1 else m for m in modes for v in (wires if m.startswith("http") else [1])]
    for size in filter(None, args.merge.split(",")):
        modes.append(f"http x{args.clients} m{int(size)}")
        if args.workers > 1:
            modes.append(f"http x{args.clients} w{args.workers} m{int(size)}")
    steady = f"http x{args.clients} m{DEFAULT_PUSH_EVERY}"
    if args.steady and steady not in modes:
        modes.append(steady)
    if args.baseline is not None:
        modes = [twin for m in modes for twin in ((m, f"{m} base") if m.startswith("http") else (m,))]
    results: dict[str, list[float]] = {m: [] for m in modes}
    # interleaved rounds: this VM's speed drifts by tens of percent over a minute, and every
    # ratio below must compare modes measured under the same drift
    for round_no in range(1, args.rounds + 1):
        print(f"round {round_no}")
        for mode in modes:
            results[mode].append(run_mode(mode, args))
    print("medians over rounds (samples/s, GPU-samples/s = half):")
    medians = {m: statistics.median(r) for m, r in results.items()}
    for mode, rates in results.items():
        print(f"  {mode:>15}: {medians[mode]:,.0f}  (rounds: {', '.join(f'{r:,.0f}' for r in rates)})")
    if "raw-copy" in medians:
        base = medians["raw-copy"]
        print(
            "ratios vs raw COPY (the physical limit): "
            + ", ".join(f"{m} {medians[m] / base:.2f}" for m in modes)
        )
        if args.steady:
            print(
                f"steady state at the default config (agent.push_every = {DEFAULT_PUSH_EVERY} merged, "
                f"'{steady}'): {medians[steady]:,.0f} vs raw COPY {base:,.0f} samples/s = "
                f"{medians[steady] / base:.2f} (rounds: "
                + ", ".join(f"{a / b:.2f}" for a, b in zip(results[steady], results["raw-copy"], strict=True))
                + ")"
            )


def run_mode(mode: str, args: argparse.Namespace) -> float:
    """One mode on its own fresh database (no warm cache shared between modes); samples/s."""
    batches = make_batches(args.nodes, args.cycles, args.gpus, timedelta(minutes=0), args.per_batch)
    name, url, engine = fresh_db()
    try:
        if mode.startswith("raw-copy"):
            elapsed, lat = bench_raw_copy(engine, batches, gpu_only=mode == "raw-copy gpu")
        elif mode.startswith("http"):
            workers = args.workers if " w" in mode else 1
            bundle = int(found.group(1)) if (found := re.search(r" b(\d+)", mode)) else 1
            clients = args.clients if "x" in mode else 1
            pure_python = " py" in mode
            version = 2 if " v2" in mode else 1
            merged = int(mode.split(" m")[1].split()[0]) if " m" in mode else 1
            source = args.baseline if mode.endswith(" base") else None
            elapsed, lat = bench_http(
                url,
                engine,
                batches,
                clients,
                workers,
                bundle,
                pure_python,
                version,
                merged,
                source,
            )
        else:
            elapsed, lat = bench_store(engine, batches, mode)
    finally:
        engine.dispose()
        drop_db(name)
    samples = sum(len(b.samples) for b in batches)
    gpu = sum(1 for b in batches for s in b.samples if s.kind == "gpu")
    print(
        f"  {mode:>12}: {len(batches)} batches, {samples} samples ({gpu} GPU) in {elapsed:.2f} s = "
        f"{samples / elapsed:,.0f} samples/s, {gpu / elapsed:,.0f} GPU-samples/s; "
        + (
            f"per {'request' if mode.startswith('http') else 'store call'} "
            f"p50 {p(lat, 50):.1f} ms p99 {p(lat, 99):.1f} ms"
            if not mode.startswith("raw-copy")
            else "all rows in one COPY transaction"
            + (
                " (GPU and process rows only: samples/s as if the host rows cost nothing)"
                if "gpu" in mode
                else ""
            )
        )
    )
    return samples / elapsed


if __name__ == "__main__":
    main()
