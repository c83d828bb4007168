"""``scripts/demo`` (the README's main command) takes gpuwatch's own options among the demo's:
``scripts/demo --db URL`` runs the demo on that database, as the README says."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not (ROOT / ".venv/bin/gpuwatch").exists(), reason="scripts/demo runs from .venv")
def test_demo_script_passes_db_before_the_subcommand(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    env = {**os.environ, "GPUWATCH_DB": ""}  # the --db given here, not one from the environment
    run = subprocess.run(
        ["bash", str(ROOT / "scripts/demo"), "--nodes", "2", "--db", f"sqlite:///{db}", "--cycles", "6"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"database: sqlite:///{db}" in run.stdout and db.exists()
    refused = subprocess.run(
        ["bash", str(ROOT / "scripts/demo"), "--db"], capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode == 2 and refused.stderr.strip() == "scripts/demo: --db needs a value"
