"""Shared runs of the reference workload: each scenario runs once per session, on CPU.

The runs need torch (the ``workload`` extra); without it the tests that use them skip
with the install hint. torch's CPU wheel warns at import when NumPy is missing; that one
message is filtered where the workload imports torch (``gpuwatch.workload._torch``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuwatch.workload.scenarios import RunResult

#: seconds each scenario runs in the suite: enough steps on 2 cores, short enough for CI
DURATIONS = {"idle-after-start": 3.0, "comm-bound": 3.0}
DEFAULT_DURATION = 2.5


def require_torch() -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Failed to initialize NumPy", category=UserWarning)
        pytest.importorskip("torch", reason="the workload tests need torch: pip install 'gpuwatch[workload]'")


@pytest.fixture(scope="session")
def workload_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], RunResult]:
    """``workload_run(name)``: that scenario's run on CPU, with its activity file, cached."""
    require_torch()
    from gpuwatch.workload.scenarios import run_scenario

    cache: dict[str, RunResult] = {}
    folder: Path = tmp_path_factory.mktemp("activity")

    def run(name: str) -> RunResult:
        if name not in cache:
            cache[name] = run_scenario(
                name,
                duration_s=DURATIONS.get(name, DEFAULT_DURATION),
                device="cpu",
                activity_file=folder / f"{name}.jsonl",
            )
        return cache[name]

    return run
