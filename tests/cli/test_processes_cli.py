"""``gpuwatch processes NODE``: the packed per-process readings, as an admin asks for them."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta, timezone

from click.testing import CliRunner

from gpuwatch import wire
from gpuwatch.cli.main import cli
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.migrate import upgrade
from gpuwatch.sql.nodes import create_token, get_node
from tests import factories

T = factories.T0 + timedelta(hours=12)  # noon: clear of midnight
GIB = 2**30


def _run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _gpu(ts, index: int, processes: list[wire.GpuProcess]) -> wire.GpuSample:
    return factories.gpu_sample(ts, index, processes=processes)


def _store(db_url: str) -> None:
    """node001, 3 cycles: GPU 0 runs pid 100 (job 7) growing 10 -> 30 GiB; GPU 1 runs pid 200
    (job 8) in the first two cycles, then a stray pid 300 with no job."""
    engine = create_engine(db_url)
    upgrade(engine)
    create_token(engine, "node001")
    with engine.connect() as conn:
        node_id = get_node(conn, "node001").id
    samples = []
    for c in range(3):
        ts = T + timedelta(seconds=10 * c)
        samples.append(
            _gpu(
                ts,
                0,
                [
                    wire.GpuProcess(
                        pid=100, used_memory_bytes=(10 + 10 * c) * GIB, sm_util_ratio=0.5, job_id="7"
                    )
                ],
            )
        )
        stray = wire.GpuProcess(pid=300, used_memory_bytes=GIB)
        samples.append(
            _gpu(ts, 1, [wire.GpuProcess(pid=200, job_id="8", sm_util_ratio=0.2)] if c < 2 else [stray])
        )
    BatchStore(engine).store(node_id, wire.Batch(node="node001", agent_version="t", samples=samples))
    engine.dispose()


def test_one_line_per_gpu_pid_and_job(db_url):
    _store(db_url)
    end = (T + timedelta(minutes=1)).isoformat()
    rows = json.loads(_run("--db", db_url, "processes", "node001", "--end", end, "--format", "json").output)
    assert [(r["gpu_index"], r["pid"], r["job_id"], r["readings"]) for r in rows] == [
        (0, 100, "7", 3),
        (1, 200, "8", 2),
        (1, 300, None, 1),
    ]
    first = rows[0]
    assert first["max_used_memory_gib"] == 30.0 and first["mean_sm_util_ratio"] == 0.5
    assert first["first_ts"].startswith(T.strftime("%Y-%m-%dT%H:%M:%S"))
    assert rows[2]["mean_sm_util_ratio"] is None, "unknown stays unknown, not 0"
    one_gpu = _run("--db", db_url, "processes", "node001", "--end", end, "--gpu", "1", "--format", "json")
    assert [r["pid"] for r in json.loads(one_gpu.output)] == [200, 300]
    table = _run("--db", db_url, "processes", "node001", "--end", end, "--gpu", "1").output
    assert "processes on node001 GPU 1" in table and "│ 300 " in table and "│ 100 " not in table
    # utilization in percent, as every table shows it; unknown stays a dash
    line = next(line for line in table.splitlines() if "│ 200 " in line)
    assert "│ 20%" in line and "0.2 " not in line


def test_each_reading_and_the_window(db_url):
    _store(db_url)
    # a window holding only the last two cycles
    end = (T + timedelta(seconds=25)).isoformat()
    out = _run(
        "--db", db_url, "processes", "node001", "--end", end, "--since", "1", "--each", "--format", "csv"
    )
    rows = list(csv.DictReader(io.StringIO(out.output)))
    assert len(rows) == 3 * 2, "two GPUs, one process each, three cycles"
    late = _run("--db", db_url, "processes", "node001", "--end", (T - timedelta(hours=2)).isoformat())
    assert late.exit_code == 0 and "No compute process seen" in late.output
    # another zone, the same instant: the same readings, the window shown in UTC
    berlin = (T + timedelta(seconds=25)).astimezone(timezone(timedelta(hours=1))).isoformat()
    same = _run(
        "--db", db_url, "processes", "node001", "--end", berlin, "--since", "1", "--each", "--format", "csv"
    )
    assert same.output == out.output
    table = _run("--db", db_url, "processes", "node001", "--end", berlin, "--since", "1").output
    assert f"{T + timedelta(seconds=25):%H:%M} UTC" in table


def test_unknown_node_and_naive_time_are_clear_errors(db_url):
    _store(db_url)
    missing = CliRunner().invoke(cli, ["--db", db_url, "processes", "node999"])
    assert missing.exit_code != 0 and "no node 'node999'" in missing.output
    naive = CliRunner().invoke(cli, ["--db", db_url, "processes", "node001", "--end", "2026-12-01T12:00:00"])
    assert naive.exit_code != 0 and "give a time zone" in naive.output
