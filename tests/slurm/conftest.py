"""Fixtures of the Slurm tests: recorded outputs, and the live cluster of start-slurm.sh.

The live cluster is the one ``tests/slurm/start-slurm.sh`` starts. Without it (no ``squeue``
on PATH, or the controller not answering) the ``slurm``-marked tests skip locally and fail
in CI (``CI=true``), where a skip would hide a broken set-up.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import missing

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
V2205 = FIXTURES / "22.05"
V2405 = FIXTURES / "24.05"


def recorded_ids() -> dict[str, str]:
    """``jobs.env`` of the 22.05 recording: role -> job id (gpu2=25, ...)."""
    out: dict[str, str] = {}
    for line in (V2205 / "jobs.env").read_text().splitlines():
        key, _, value = line.partition("=")
        out[key] = value
    return out


@pytest.fixture(scope="session")
def ids() -> dict[str, str]:
    return recorded_ids()


def _cluster_problem() -> str | None:
    for tool in ("squeue", "sbatch", "scontrol", "scancel"):
        if shutil.which(tool) is None:
            return f"{tool} not on PATH"
    try:
        proc = subprocess.run(
            ["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=15, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo failed: {exc}"
    if proc.returncode != 0:
        return f"sinfo exit {proc.returncode}: {proc.stderr.strip()[-200:]}"
    states = proc.stdout.split()
    # "comp": jobs of a previous test still completing (seconds after a scancel); usable
    if not any(s.rstrip("*~#") in _USABLE for s in states):
        return f"no usable node (sinfo states: {states or 'none'})"
    return None


_USABLE = ("idle", "mix", "mixed", "alloc", "allocated", "comp", "completing")


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """Require the live cluster: skip without it, or fail when ``CI=true``."""
    problem = _cluster_problem()
    if problem is not None:
        message = f"Slurm cluster not available ({problem}); start it with tests/slurm/start-slurm.sh"
        missing(message, "the Slurm tests")
