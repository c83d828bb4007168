"""``gpuwatch import`` on SQLite and PostgreSQL: the documented example round-trips."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa
from click.testing import CliRunner

from gpuwatch.cli.main import cli
from gpuwatch.sql.schema import gpu_minutes, job_gpus, nodes, slurm_jobs, verdicts

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"
JSONL = EXAMPLES / "idle-and-input.jsonl"
JOBS = EXAMPLES / "idle-and-input.jobs.json"
#: what docs/cli.md says the example gives
DOCUMENTED = {"9034": "idle_allocation", "9042": "input_bound"}


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_example_is_small() -> None:
    assert JSONL.stat().st_size < 300_000


def test_import_example_gets_documented_causes(engine, db_url) -> None:
    result = run("--db", db_url, "import", str(JSONL), "--jobs", str(JOBS), "--classify-at", "end",
                 "--format", "json")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "imported 4 of 4 batch(es), 720 samples, 2 node(s), 2 job(s)" in result.stderr
    rows = json.loads(result.stdout)
    assert {r["job_id"]: r["cause"] for r in rows} == DOCUMENTED
    with engine.connect() as conn:
        assert conn.execute(sa.select(nodes.c.token_sha256)).scalars().all() == [None, None]
        assert conn.execute(sa.select(sa.func.count()).select_from(job_gpus)).scalar() == 2
        assert conn.execute(sa.select(slurm_jobs.c.source).distinct()).scalars().all() == ["import"]
        assert conn.execute(sa.select(sa.func.count()).select_from(gpu_minutes)).scalar() == 2 * 11
        first = conn.execute(sa.select(sa.func.count()).select_from(verdicts)).scalar()
    # importing again: batches are duplicates, jobs merge, the same evaluation is replaced
    again = run("--db", db_url, "import", str(JSONL), "--jobs", str(JOBS), "--classify-at", "end")
    assert "imported 0 of 4 batch(es)" in again.stderr
    assert "idle_allocation" in again.stdout and "input_bound" in again.stdout
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(verdicts)).scalar() == first
    # the replayed job can be explained like a live one
    detail = run("--db", db_url, "job", "9034", "--at", "2026-03-02T08:11:00+00:00")
    assert "idle_allocation" in detail.stdout and "c34n0:0 |▁" in detail.stdout


def test_import_without_classify_and_at_time(engine, db_url) -> None:
    result = run("--db", db_url, "import", str(JSONL), "--jobs", str(JOBS))
    assert result.exit_code == 0 and result.stdout == ""
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(verdicts)).scalar() == 0
    at = run("--db", db_url, "import", str(JSONL), "--jobs", str(JOBS), "--classify-at",
             "2026-03-02T08:10:07+00:00", "--format", "csv")  # fmt: skip
    assert at.exit_code == 0, at.output
    assert "idle_allocation" in at.stdout and "input_bound" in at.stdout


def test_bad_job_file(engine, db_url, tmp_path) -> None:
    bad = tmp_path / "jobs.json"
    bad.write_text(json.dumps([{"user": "x"}]))
    result = CliRunner().invoke(cli, ["--db", db_url, "import", str(JSONL), "--jobs", str(bad)])
    assert result.exit_code == 1 and "job_id is required" in result.output
