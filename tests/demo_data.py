"""The demo's data (a job of every cause) loaded through the real pipeline, for tests."""

from __future__ import annotations

from gpuwatch.cli.demo import DemoResult, run_demo
from gpuwatch.config import load_settings


def load_demo(db_url: str, cycles: int | None = 60) -> DemoResult:
    """Run ``gpuwatch demo`` quietly into ``db_url``: ``cycles`` samples per node (None: its default)."""
    settings = load_settings(database={"url": db_url})
    return run_demo(settings, cycles=cycles, echo=lambda _line: None)
