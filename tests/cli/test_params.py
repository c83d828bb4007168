"""Numbers and times beyond what a database integer or datetime arithmetic holds are one line
of usage error (exit 2) on every command that takes them, never a driver's overflow."""

from __future__ import annotations

from datetime import datetime, timezone

import click
import pytest
from click.testing import CliRunner

from gpuwatch.cli.main import cli
from gpuwatch.cli.params import parse_time


@pytest.fixture
def upgraded(sqlite_url) -> str:
    assert CliRunner().invoke(cli, ["--db", sqlite_url, "db", "upgrade"]).exit_code == 0
    return sqlite_url


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["jobs", "--low-util", "--limit", "99999999999999999999"], "--limit"),
        (["jobs", "--limit", "0"], "--limit"),
        (["alerts", "list", "--limit", "-1"], "--limit"),
        (["nodes", "--window", "99999999999"], "--window"),
        (["processes", "n1", "--since", "99999999999"], "--since"),
        (["processes", "n1", "--end", "0001-01-01T00:00:00+00:00"], "--end"),
        (["job", "1", "--at", "9999-12-31T23:59:59"], "--at"),
        (["report", "--until", "0001-01-01T00:00Z"], "--until"),
        (["job", "1", "--at", "yesterday"], "--at"),
    ],
)
def test_out_of_range_is_one_line_of_usage(upgraded, args: list[str], option: str) -> None:
    result = CliRunner().invoke(cli, ["--db", upgraded, *args])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in result.output or f"Invalid value for {option}" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_times_with_and_without_a_zone() -> None:
    utc = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)
    assert parse_time("2026-12-01T08:00Z", "--at", zone_required=True) == utc
    assert parse_time("2026-12-01T09:00+01:00", "--at", zone_required=True) == utc
    assert parse_time("2026-12-01 08:00", "--at", zone_required=False) == utc  # no zone: UTC
    with pytest.raises(click.BadParameter, match="give a time zone"):
        parse_time("2026-12-01 08:00", "--end", zone_required=True)
    with pytest.raises(click.BadParameter, match="from 1970 to 8999"):
        parse_time("1969-12-31T23:59Z", "--end", zone_required=True)
