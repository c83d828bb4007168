"""``gpuwatch jobs --low-util`` on SQLite and PostgreSQL: contents, sort, filters, JSON keys."""

from __future__ import annotations

import csv
import io
import json

from click.testing import CliRunner

from gpuwatch.cli.jobs import LOW_UTIL_COLUMNS
from gpuwatch.cli.main import cli
from gpuwatch.sql.engine import create_engine
from gpuwatch.views import LowUtilFilters, LowUtilJob, low_util_jobs
from tests.classify import corpus
from tests.cli_lowutil.conftest import CASES, job_of

#: the documented JSON schema (docs/cli.md): renaming or dropping a key breaks other tools
DOCUMENTED_KEYS = [
    "job_id", "user", "account", "partition", "state", "gpus", "start_at", "end_at",
    "duration_s", "gpu_hours", "gpu_hours_wasted", "mean_util_ratio", "cause", "confidence",
    "window_kind", "evaluated_at", "summary",
]  # fmt: skip
NOW = corpus.T0.replace(minute=30)


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def rows(url: str, **kw) -> list[LowUtilJob]:
    engine = create_engine(url)
    try:
        return low_util_jobs(engine, LowUtilFilters(**kw), now=NOW)
    finally:
        engine.dispose()


def test_listing_contents(classified) -> None:
    url, built = classified
    got = {r.job_id: r for r in rows(url)}
    unhealthy = {job_of(built, n): c for n, c in CASES.items() if c != "healthy"}
    assert {j: r.cause for j, r in got.items()} == unhealthy
    idle = got[job_of(built, "idle-all-4-h200")]
    assert idle.gpus == 4 and idle.user == "alice" and idle.account == "lab"
    assert idle.window_kind == "job" and idle.mean_util_ratio < 0.02
    assert idle.summary.startswith(f"job {idle.job_id}: all 4 GPUs idle")
    assert 0.9 <= idle.gpu_hours_wasted <= idle.gpu_hours <= 1.1  # 4 GPUs x ~15 min
    assert idle.duration_s == 30 * 60  # a running job: start .. now (NOW is T0 + 30 min)


def test_sort_orders(classified) -> None:
    url, _ = classified
    wasted = [r.gpu_hours_wasted for r in rows(url, sort="wasted")]
    assert wasted == sorted(wasted, reverse=True)
    util = [r.mean_util_ratio for r in rows(url, sort="util")]
    assert util == sorted(util)
    assert len(rows(url, sort="duration")) == len(rows(url, sort="start")) == 3
    assert [r.job_id for r in rows(url, limit=1)] == [rows(url)[0].job_id]


def test_filters(classified) -> None:
    url, built = classified
    bob = job_of(built, "input-cpu-saturated")
    assert [r.job_id for r in rows(url, user="bob")] == [bob]
    assert [r.job_id for r in rows(url, account="chem")] == [bob]
    assert [r.job_id for r in rows(url, partition="big")] == [bob]
    assert bob not in {r.job_id for r in rows(url, user="alice")}
    noamp = job_of(built, "noamp-h200-1")
    node = next(iter(next(b for b in built if b.job_id == noamp).batches))
    assert [r.job_id for r in rows(url, node=node)] == [noamp]
    assert [r.cause for r in rows(url, cause="idle_allocation")] == ["idle_allocation"]
    assert rows(url, states=("COMPLETED",)) == []
    assert rows(url, evaluated_since=NOW) == []  # every evaluation was before NOW


def test_cli_json_keys_and_values(classified) -> None:
    url, built = classified
    result = run("--db", url, "jobs", "--low-util", "--since", "1000w", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [k for k, _ in LOW_UTIL_COLUMNS] == DOCUMENTED_KEYS
    assert all(list(r) == DOCUMENTED_KEYS for r in data) and len(data) == 3
    idle = next(r for r in data if r["cause"] == "idle_allocation")
    assert idle["job_id"] == job_of(built, "idle-all-4-h200")
    assert isinstance(idle["gpus"], int) and isinstance(idle["duration_s"], int)
    assert isinstance(idle["gpu_hours_wasted"], float) and isinstance(idle["mean_util_ratio"], float)
    assert idle["start_at"].endswith("+00:00") and idle["end_at"] is None
    assert idle["evaluated_at"] == corpus.T0.replace(minute=15).isoformat()


def test_cli_table_csv_and_cause(classified) -> None:
    url, built = classified
    table = run("--db", url, "jobs", "--low-util", "--since", "1000w", "--sort", "util")
    assert table.exit_code == 0, table.output
    for cause in ("idle_allocation", "input_bound", "no_mixed_precision"):
        assert cause in table.output
    assert "healthy" not in table.output and "GPU-h wasted" in table.output
    out = run("--db", url, "jobs", "--cause", "input_bound", "--since", "1000w", "--format", "csv")
    got = list(csv.DictReader(io.StringIO(out.output)))
    assert [r["job_id"] for r in got] == [job_of(built, "input-cpu-saturated")]
    assert list(got[0]) == DOCUMENTED_KEYS
    bad = CliRunner().invoke(cli, ["--db", url, "jobs", "--low-util", "--sort", "nope"])
    assert bad.exit_code == 2


def test_an_80_column_table_keeps_every_cause_whole(classified, monkeypatch) -> None:
    """A narrow terminal leaves the evidence out and says so; it never cuts a cause or job id."""
    url, built = classified
    monkeypatch.setenv("COLUMNS", "80")
    table = run("--db", url, "jobs", "--low-util", "--since", "1000w")
    assert table.exit_code == 0, table.output
    lines = table.output.rstrip("\n").splitlines()
    assert max(len(line) for line in lines[:-1]) <= 80 and "…" not in table.output
    for cause in ("idle_allocation", "input_bound", "no_mixed_precision"):
        assert cause in table.output
    assert job_of(built, "input-cpu-saturated") in table.output
    assert lines[-1].startswith("80-column terminal: evidence") and "not shown" in lines[-1]
    monkeypatch.setenv("COLUMNS", "250")
    wide = run("--db", url, "jobs", "--low-util", "--since", "1000w")
    header = next(line for line in wide.output.splitlines() if "cause" in line)
    assert "evidence" in header and "not shown" not in wide.output
