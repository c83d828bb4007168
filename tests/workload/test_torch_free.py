"""The CLI and the bridge work without torch: it is an optional extra."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from gpuwatch.cli.main import cli
from gpuwatch.workload.scenarios import SCENARIOS

EXPECTED = {
    "healthy",
    "idle",
    "input-bound",
    "small-batch",
    "fp32",
    "amp",
    "memory-pressure",
    "comm-bound",
    "cpu-only",
    "idle-after-start",
}


def test_importing_the_cli_does_not_import_torch() -> None:
    code = (
        "import sys, gpuwatch.cli.main, gpuwatch.collectors.workload_backend, gpuwatch.workload.scenarios;"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_nothing_outside_the_workload_package_imports_torch() -> None:
    from pathlib import Path

    import gpuwatch

    root = Path(gpuwatch.__file__).parent
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "workload" not in path.relative_to(root).parts
        and any(
            line.strip().startswith(("import torch", "from torch")) for line in path.read_text().splitlines()
        )
    ]
    assert offenders == []


def test_every_scenario_is_registered_with_a_full_docstring() -> None:
    assert set(SCENARIOS) == EXPECTED
    for entry in SCENARIOS.values():
        for part in ("Reproduces:", "Signals (GPU):", "Simulated:", "Fix:", "Throughput:"):
            assert part in entry.doc, f"{entry.name}: docstring lacks {part!r}"


def test_workload_list_and_usage() -> None:
    runner = CliRunner()
    listed = runner.invoke(cli, ["workload", "--list"])
    assert listed.exit_code == 0, listed.output
    assert all(name in listed.output for name in EXPECTED)
    missing = runner.invoke(cli, ["workload"])
    assert missing.exit_code != 0
    assert "--scenario is required" in missing.output
