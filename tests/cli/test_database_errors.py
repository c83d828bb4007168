"""Every database problem is one line and exit status 1, and a read never creates a database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import PG_ADMIN_URL, require_postgres


def gpuwatch(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUWATCH_")}
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", *args], capture_output=True, text=True, timeout=120, env=env
    )


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "command", [["jobs"], ["jobs", "--low-util"], ["nodes"], ["job", "1"], ["db", "current"]]
)
def test_an_unreachable_server(command: list[str]) -> None:
    url = f"postgresql://postgres@127.0.0.1:{closed_port()}/gpuwatch"
    line = one_line_error(gpuwatch("--db", url, *command))
    assert "Connection refused" in line


@pytest.mark.postgres
def test_a_database_that_does_not_exist() -> None:
    require_postgres()
    url = sa.engine.make_url(PG_ADMIN_URL).set(database="gpuwatch_no_such_db").render_as_string(False)
    line = one_line_error(gpuwatch("--db", url, "jobs"))
    assert 'database "gpuwatch_no_such_db" does not exist' in line


def test_a_mistyped_sqlite_path_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "typo" / "x.db"
    line = one_line_error(gpuwatch("--db", f"sqlite:///{path}", "jobs", "--low-util"))
    assert f"no database at {path}" in line
    assert not path.parent.exists()


def test_db_upgrade_creates_the_sqlite_file_and_reads_then_work(tmp_path: Path) -> None:
    path = tmp_path / "new" / "gpuwatch.db"
    upgrade = gpuwatch("--db", f"sqlite:///{path}", "db", "upgrade")
    assert upgrade.returncode == 0, upgrade.stderr
    assert path.exists()
    assert gpuwatch("--db", f"sqlite:///{path}", "jobs").returncode == 0


def test_a_url_of_another_database_names_the_key() -> None:
    proc = gpuwatch("--db", "nosuchdriver://x/y", "jobs")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "database.url" in proc.stderr and "sqlite:/// or postgresql://" in proc.stderr
