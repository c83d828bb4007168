"""Cost of the daemon's Slurm sync at 1,000 running jobs, and what it asks of slurmctld.

    .venv/bin/python bench/slurm_sync.py [--jobs 1000] [--cycles 10] [--live-calls 5]

Builds one ``squeue --json`` document of ``--jobs`` running jobs by cloning the running jobs
of the recorded 22.05 answer (tests/fixtures/slurm/22.05/squeue.json) with new ids, nodes
(4 GPUs each) and GPU indices, then times per sync cycle, median over ``--cycles``:

- parse: ``parse_squeue_json`` of the text (JSON decoding included), what the daemon does
  with every answer;
- store: ``SlurmSync.store_running`` (upsert of every job + ``job_gpus`` diff) into a fresh
  throwaway PostgreSQL database (127.0.0.1:5432 user postgres, or $GPUWATCH_BENCH_PG) and a
  SQLite file — the first cycle (all inserts), steady cycles (nothing changed), and churn
  cycles (10 % of the jobs replaced by new ones, as jobs end and start).

Then the cost to the controller: calls per minute at the configured intervals (one squeue
per ``sync_interval_s``, one sacct per ``sacct_interval_s``, whatever the cluster's size),
and the wall time of real ``squeue --json --all`` / ``sacct --json`` calls on the live
cluster of tests/slurm/start-slurm.sh when one answers (skipped otherwise).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuwatch.config import SlurmConfig  # noqa: E402
from gpuwatch.daemon.slurm_sync import SlurmSync  # noqa: E402
from gpuwatch.slurm.commands import SlurmClient  # noqa: E402
from gpuwatch.slurm.squeue import parse_squeue_json  # noqa: E402
from gpuwatch.sql import migrate  # noqa: E402
from gpuwatch.sql.engine import create_engine  # noqa: E402

ADMIN = os.environ.get("GPUWATCH_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
RECORDED = ROOT / "tests" / "fixtures" / "slurm" / "22.05" / "squeue.json"
GPUS_PER_NODE = 4


def scaled_document(n_jobs: int, first_id: int = 100_000) -> str:
    """``n_jobs`` running jobs cloned from the recording's running ones, as squeue JSON text.

    Each node has :data:`GPUS_PER_NODE` GPUs; GPU jobs take the next free indices of the
    current node (a new node when it is full), CPU-only jobs share the current node.
    """
    doc = json.loads(RECORDED.read_text())
    templates = [j for j in doc["jobs"] if j.get("job_state") == "RUNNING"]
    if not templates:
        raise SystemExit(f"no running job in {RECORDED}")
    jobs: list[dict[str, Any]] = []
    node, used = 0, 0
    for k in range(n_jobs):
        job = copy.deepcopy(templates[k % len(templates)])
        want = sum(int(x) for x in _counts(job.get("gres_detail") or []))
        if want and used + want > GPUS_PER_NODE:
            node, used = node + 1, 0
        name = f"gpu{node:04d}"
        job["job_id"] = first_id + k
        job["array_job_id"], job["array_task_id"] = 0, None
        job["nodes"] = name
        resources = job.get("job_resources") or {}
        resources["nodes"] = name
        for alloc in resources.get("allocated_nodes") or []:
            alloc["nodename"] = name
        if want:
            idx = f"{used}-{used + want - 1}" if want > 1 else str(used)
            job["gres_detail"] = [f"gpu:fake:{want}(IDX:{idx})"]
            used += want
        jobs.append(job)
    doc["jobs"] = jobs
    return json.dumps(doc)


def _counts(details: list[str]) -> list[int]:
    out = []
    for entry in details:  # gpu:fake:2(IDX:0-1) -> 2
        head = entry.split("(", 1)[0]
        last = head.rsplit(":", 1)[-1]
        out.append(int(last) if last.isdigit() else 1)
    return out


def churned(text: str, fraction: float, cycle: int) -> str:
    """The document with ``fraction`` of its jobs given new ids (ended, replaced by new jobs)."""
    doc = json.loads(text)
    step = max(1, int(1 / fraction))
    for k, job in enumerate(doc["jobs"]):
        if k % step == cycle % step:
            job["job_id"] += 10_000_000 * (cycle + 1)
    return json.dumps(doc)


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:8.1f} ms"


def bench_store(engine: sa.Engine, text: str, cycles: int) -> dict[str, list[float]]:
    sync = SlurmSync(engine, SlurmClient(runner=_no_runner), SlurmConfig(enabled=True))
    times: dict[str, list[float]] = {"first": [], "steady": [], "churn 10%": []}
    jobs = parse_squeue_json(text)
    t0 = time.perf_counter()
    sync.store_running(jobs)
    times["first"].append(time.perf_counter() - t0)
    for _ in range(cycles):
        t0 = time.perf_counter()
        sync.store_running(jobs)
        times["steady"].append(time.perf_counter() - t0)
    for c in range(cycles):
        moved = parse_squeue_json(churned(text, 0.1, c))
        t0 = time.perf_counter()
        sync.store_running(moved)
        times["churn 10%"].append(time.perf_counter() - t0)
    return times


def _no_runner(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    raise AssertionError("the store bench runs no command")


def fresh_pg() -> tuple[str, sa.Engine] | None:
    name = f"gpuwatch_bench_{uuid.uuid4().hex[:8]}"
    try:
        admin = sa.create_engine(ADMIN, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
    except sa.exc.OperationalError as exc:
        print(f"PostgreSQL: skipped ({str(exc).splitlines()[0]})")
        return None
    url = sa.engine.make_url(ADMIN).set(database=name).render_as_string(hide_password=False)
    engine = create_engine(url)
    migrate.upgrade(engine)
    return name, engine


def drop_pg(name: str) -> None:
    admin = sa.create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def live_calls(n: int) -> None:
    if shutil.which("squeue") is None:
        print("live cluster: skipped (no squeue on PATH)")
        return
    client = SlurmClient(timeout_s=30)
    for label, call in (
        ("squeue --json --all", client.jobs),
        (
            "sacct --json -a -X (1 h)",
            lambda: client.finished_jobs(datetime.now(timezone.utc) - timedelta(hours=1)),
        ),
    ):
        walls, count = [], 0
        try:
            for _ in range(n):
                t0 = time.perf_counter()
                count = len(call())
                walls.append(time.perf_counter() - t0)
        except Exception as exc:  # no controller: say so, the rest of the figures stand
            print(f"live {label}: skipped ({exc})")
            continue
        print(
            f"live {label:<26} {median_ms(walls)} median of {n} "
            f"(min {min(walls) * 1000:.1f} ms), {count} jobs"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--live-calls", type=int, default=5)
    args = ap.parse_args()

    text = scaled_document(args.jobs)
    parse_times = []
    for _ in range(args.cycles):
        t0 = time.perf_counter()
        jobs = parse_squeue_json(text)
        parse_times.append(time.perf_counter() - t0)
    gpu_jobs = sum(1 for j in jobs if j.gpu_indices)
    pairs = sum(len(i) for j in jobs for i in j.gpu_indices.values())
    nodes = len({n for j in jobs for n in j.nodes})
    print(f"document: {len(jobs)} running jobs ({gpu_jobs} with GPUs, {pairs} GPUs, {nodes} nodes), "
          f"{len(text) / 1e6:.2f} MB of squeue JSON")  # fmt: skip
    print(f"parse (json + SlurmJob)        {median_ms(parse_times)} per cycle")

    results: dict[str, dict[str, list[float]]] = {}
    pg = fresh_pg()
    if pg is not None:
        name, engine = pg
        try:
            results["postgresql"] = bench_store(engine, text, args.cycles)
        finally:
            engine.dispose()
            drop_pg(name)
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite:///{tmp}/bench.db")
        try:
            migrate.upgrade(engine)
            results["sqlite"] = bench_store(engine, text, args.cycles)
        finally:
            engine.dispose()
    for backend, times in results.items():
        for label, values in times.items():
            print(f"store {backend:<10} {label:<10} {median_ms(values)} per cycle")

    cfg = SlurmConfig()
    per_min = 60 / cfg.sync_interval_s + 60 / cfg.sacct_interval_s
    print(
        f"slurmctld/slurmdbd: {per_min:.1f} calls/min at the defaults (squeue every "
        f"{cfg.sync_interval_s:g} s + sacct every {cfg.sacct_interval_s:g} s), independent of the job count"
    )
    if args.live_calls:
        live_calls(args.live_calls)


if __name__ == "__main__":
    main()
