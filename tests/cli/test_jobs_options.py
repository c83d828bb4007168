"""`gpuwatch jobs` options and table output on an empty database: states, empty tables, width."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpuwatch.cli.main import cli
from gpuwatch.cli.render import OutputFormat, render
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine


@pytest.fixture
def empty_db(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'g.db'}"
    engine = create_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


def test_an_unknown_state_is_refused(empty_db: str) -> None:
    result = CliRunner().invoke(cli, ["--db", empty_db, "jobs", "--state", "RUNING"])
    assert result.exit_code == 2 and "'RUNING' is not a Slurm job state" in result.output


@pytest.mark.parametrize("states", ["R,pd", "RUNNING,PENDING", "cd,OOM"])
def test_known_states_and_short_codes_pass(empty_db: str, states: str) -> None:
    assert CliRunner().invoke(cli, ["--db", empty_db, "jobs", "--state", states]).exit_code == 0


@pytest.mark.parametrize("low_util", [[], ["--low-util"]])
def test_an_empty_table_says_so_and_json_stays_a_list(empty_db: str, low_util: list[str]) -> None:
    table = CliRunner().invoke(cli, ["--db", empty_db, "jobs", *low_util])
    assert table.exit_code == 0 and table.output.strip().startswith("no jobs match")
    as_json = CliRunner().invoke(cli, ["--db", empty_db, "jobs", *low_util, "--format", "json"])
    assert json.loads(as_json.output) == []


def test_tables_fit_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"a": "x" * 60, "b": "y" * 60, "c": "z" * 60}]
    columns = [("a", "A"), ("b", "B"), ("c", "C")]
    monkeypatch.setenv("COLUMNS", "80")
    narrow = render(rows, columns, OutputFormat.TABLE)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    monkeypatch.setenv("COLUMNS", "200")
    wide = render(rows, columns, OutputFormat.TABLE)
    assert max(len(line) for line in wide.splitlines()) > 80
    assert render(rows, columns, OutputFormat.CSV).count("x") == 60  # CSV is never cut


def test_a_table_stops_at_a_page_and_says_how_many_more(empty_db: str) -> None:
    from datetime import timedelta

    from gpuwatch.cli.jobs import TABLE_PAGE
    from gpuwatch.clock import utcnow
    from gpuwatch.sql.schema import slurm_jobs

    engine = create_engine(empty_db)
    start = utcnow() - timedelta(hours=1)
    count = TABLE_PAGE + 7
    with engine.begin() as conn:
        conn.execute(
            slurm_jobs.insert(),
            [{"job_id": str(1000 + i), "source": "test", "state": "RUNNING", "gpus": 1, "start_at": start,
              "first_seen_at": start, "updated_at": start} for i in range(count)],
        )  # fmt: skip
    engine.dispose()

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, ["--db", empty_db, "jobs", "--since", "1d", *args])
        assert result.exit_code == 0, result.output
        return result.output

    def shown(output: str) -> int:
        return sum(f"│ {1000 + i} " in output for i in range(count))

    table = run()
    assert shown(table) == TABLE_PAGE and "7 more job(s) not shown: --limit N for more, --all" in table
    assert shown(run("--all")) == count and "more job(s)" not in run("--all")
    limited = run("--limit", "5")
    assert shown(limited) == 5 and "more job(s)" not in limited  # asked for: no footer
    assert len(json.loads(run("--format", "json"))) == count  # JSON is never cut
