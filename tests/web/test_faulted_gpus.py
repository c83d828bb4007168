"""A GPU that faulted during a job is marked wherever the job is shown: the job page's GPU table
(the node page's colour and sentence), ``gpuwatch job ID`` (its table and JSON) and its plot's
legend. The demo's gpu_fault job loses one of its four GPUs to XID 79 (fallen off the bus)."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner
from fastapi.testclient import TestClient

from gpuwatch.cli.job_detail import _fault_note
from gpuwatch.cli.main import cli
from gpuwatch.daemon.app import create_app


def test_the_faulted_gpu_is_marked_on_every_surface(demo, db_url) -> None:  # type: ignore[no-untyped-def]
    settings, engine, result = demo
    job = next(j for j, cause in result.expected.items() if cause == "gpu_fault")

    shown = CliRunner().invoke(cli, ["--db", db_url, "job", job, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    gpus = json.loads(shown.output)["gpus"]
    faulted = [g for g in gpus if g["fault"]]
    assert len(faulted) == 1 and len(gpus) == 4, "one of the four GPUs, the others fine"
    (bad,) = faulted
    assert bad["xid_codes"] == [79] and bad["lost_samples"] > 0
    assert bad["fault"].startswith("XID 79 (GPU has fallen off the bus); admin; lost ")
    assert all(
        g["fault"] is None and g["xid_codes"] == [] and g["lost_samples"] == 0 for g in gpus if g is not bad
    )
    assert _fault_note(bad) == "XID 79, lost"

    table = CliRunner().invoke(cli, ["--db", db_url, "job", job], env={"COLUMNS": "240"}).output
    label = f"{bad['node']}"
    row = next(line for line in table.splitlines() if label in line and f"│ {bad['gpu_index']} " in line)
    assert "XID 79 (GPU has fallen off the bus)" in row and "│ fault" in table.replace("┃", "│")

    with TestClient(create_app(settings, engine)) as client:
        html = client.get(f"/jobs/{job}").text
    rows = re.findall(r"<tr class=faulted>(.*?)</tr>", html)
    assert len(rows) == 1 and f"<td>{bad['gpu_index']}</td>" in rows[0] and "XID 79" in rows[0]


def test_a_job_without_faults_has_no_fault_column(demo, db_url) -> None:  # type: ignore[no-untyped-def]
    _settings, _engine, result = demo
    healthy = next(j for j, cause in result.expected.items() if cause == "healthy")
    table = CliRunner().invoke(cli, ["--db", db_url, "job", healthy], env={"COLUMNS": "240"}).output
    assert "fault" not in table.split("GPUs", 1)[1].split("\n\n", 1)[0]
