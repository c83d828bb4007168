"""``gpuwatch jobs`` on SQLite and PostgreSQL: filters, --since, the three formats."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta

import click
import pytest
from click.testing import CliRunner

from gpuwatch.cli.jobs import COLUMNS, parse_since
from gpuwatch.cli.main import cli
from gpuwatch.clock import utcnow
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.slurm.model import SlurmJob
from gpuwatch.sql import jobs, migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.rollups import Rollup, floor_minute
from gpuwatch.wire import Batch, GpuSample


def run(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result


@pytest.fixture
def filled(db_url) -> str:
    now = utcnow()
    engine = create_engine(db_url)
    try:
        migrate.upgrade(engine)
        start = now - timedelta(minutes=10)
        found = [
            SlurmJob("101", "squeue-json", name="train", user="alice", account="physics", partition="gpu",
                     state="RUNNING", start=start, end=start + timedelta(hours=1), nodes=("n1",), gpus=2,
                     gpu_indices={"n1": (0, 1)}),
            SlurmJob("102", "squeue-json", name="old", user="bob", account="chem", partition="gpu",
                     state="COMPLETED", start=now - timedelta(days=3, hours=1), end=now - timedelta(days=3),
                     elapsed_s=3600, nodes=("n2",), gpus=1, gpu_indices={"n2": (3,)}, exit_code=0),
            SlurmJob("103", "squeue-json", name="cpu", user="alice", account="physics", partition="cpu",
                     state="PENDING", gpus=0),
            SlurmJob("104", "squeue-json", user="alice", state="RUNNING", start=start, nodes=("n1",),
                     array_job_id="100", array_task_id="4", gpus=0),
        ]  # fmt: skip
        with engine.begin() as conn:
            jobs.upsert_jobs(conn, found)
            jobs.replace_job_gpus(conn, {j.job_id: j.gpu_indices for j in found})
        create_token(engine, "n1")
        with engine.connect() as conn:
            node_id = get_node(conn, "n1").id
        samples = [GpuSample(ts=start + timedelta(minutes=m), gpu_index=i, util_gpu_ratio=0.5 * i)
                   for m in range(1, 6) for i in (0, 1)]  # fmt: skip
        BatchStore(engine).store(node_id, Batch(node="n1", agent_version="t", samples=samples))
        Rollup(engine).roll(floor_minute(start), floor_minute(now))  # utilization is the rollups'
    finally:
        engine.dispose()
    return db_url


def test_json_default_window_and_utilization(filled) -> None:
    result = run("--db", filled, "jobs", "--format", "json")
    assert result.exit_code == 0, result.output
    got = {r["job_id"]: r for r in json.loads(result.output)}
    assert set(got) == {"101", "103", "100_4"}  # 102 ended 3 days ago: outside the default 1d
    j = got["101"]
    assert (j["user"], j["state"], j["gpus"], j["gpu_list"], j["util_samples"]) == (
        "alice",
        "RUNNING",
        2,
        "n1:0,n1:1",
        10,
    )
    assert j["mean_util_ratio"] == 0.25 and 590 <= j["duration_s"] <= 700
    assert got["103"]["gpu_list"] is None and got["103"]["mean_util_ratio"] is None
    assert list(json.loads(result.output)[0]) == [k for k, _ in COLUMNS]


def test_filters(filled) -> None:
    def ids(*args: str) -> list[str]:
        result = run("--db", filled, "jobs", "--format", "json", *args)
        assert result.exit_code == 0, result.output
        return sorted(r["job_id"] for r in json.loads(result.output))

    assert ids("--since", "7d") == ["100_4", "101", "102", "103"]
    assert ids("--since", "7d", "--user", "bob") == ["102"]
    assert ids("--since", "7d", "--account", "physics", "--partition", "gpu") == ["101"]
    assert ids("--since", "7d", "--node", "n2") == ["102"]
    assert ids("--state", "R,PD") == ["100_4", "101", "103"]
    assert ids("--state", "completed", "--since", "1w") == ["102"]
    assert ids("--since", "2h", "--limit", "1") == ["100_4"]  # same start as 101: higher id first


def test_table_and_csv(filled) -> None:
    table = run("--db", filled, "jobs", "--since", "7d")
    assert table.exit_code == 0
    assert "n1 gpu0,1" in table.output and "Slurm jobs (since 7d)" in table.output  # CSV: n1:0,n1:1
    line = next(line for line in table.output.splitlines() if "│ 101 " in line)
    assert "25%" in line and re.search(r"│ 0h1[01]m ", line)  # util in percent, duration as 0h10m
    out = run("--db", filled, "jobs", "--since", "7d", "--format", "csv").output
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["job_id"]: r["gpu_list"] for r in rows}["101"] == "n1:0,n1:1"
    assert {r["job_id"]: r["mean_util_ratio"] for r in rows}["103"] == ""


def test_bad_since_and_old_schema(sqlite_url) -> None:
    bad = CliRunner().invoke(cli, ["--db", sqlite_url, "jobs", "--since", "yesterday"])
    assert bad.exit_code != 0 and "use a number and a unit" in bad.output
    # a span beyond what a date holds is refused in a line, not a traceback (OverflowError)
    for command in ("jobs", "report"):
        huge = CliRunner().invoke(cli, ["--db", sqlite_url, command, "--since", "99999999d"])
        assert huge.exit_code == 2 and "at most 100 years back" in huge.output, huge.output
        assert "Traceback" not in huge.output and isinstance(huge.exception, SystemExit)
    stale = CliRunner().invoke(cli, ["--db", sqlite_url, "jobs"])
    assert stale.exit_code != 0 and "gpuwatch db upgrade" in stale.output


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("2h", 7200), ("7d", 604800),
                                               ("1w", 604800), ("1.5h", 5400), (" 2H ", 7200)])  # fmt: skip
def test_parse_since(text: str, seconds: int) -> None:
    assert parse_since(text).total_seconds() == seconds


def test_parse_since_rejects() -> None:
    for text in ("", "2", "h", "-1h", "2y"):
        with pytest.raises(click.BadParameter):
            parse_since(text)
