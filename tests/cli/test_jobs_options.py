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
