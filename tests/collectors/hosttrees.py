"""Helpers for the host collector tests: recorded host trees and a clock the test moves.

A module of its own (not ``conftest``) so test files can import it by a name no other test
directory's ``conftest`` shares.

A case under ``tests/fixtures/hosts/<case>/`` holds two snapshots, ``t0`` and ``t1``, each a
tree with ``proc/``, ``sys/`` and ``cgroup/``. The collector under test is given
:class:`HostPaths` pointing through a symlink, so its paths stay fixed while the test moves
the symlink from ``t0`` to ``t1`` between two ``collect()`` calls, as time moves on a host.
The known deltas between the snapshots are listed in ``tests/fixtures/hosts/README.md``.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpuwatch.collectors.base import Collector, run_collector
from gpuwatch.config import HostPaths
from gpuwatch.wire.v1 import _Sample

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hosts"
NOW = datetime(2025, 6, 2, 12, 0, 0, tzinfo=timezone.utc)
LATER = datetime(2025, 6, 2, 12, 0, 10, tzinfo=timezone.utc)
#: seconds between the two snapshots of every case
INTERVAL_S = 10.0


class FakeClock:
    """A monotonic clock that only moves when the test says so."""

    def __init__(self, start: float = 5000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class HostTree:
    """One fixture case seen through a symlink that :meth:`advance` moves from t0 to t1."""

    def __init__(self, case_dir: Path, tmp_path: Path) -> None:
        self.case_dir = case_dir
        self.root = tmp_path / "host"
        self.root.symlink_to(case_dir / "t0", target_is_directory=True)
        self.paths = paths_at(self.root)

    def advance(self, snapshot: str = "t1") -> None:
        self.root.unlink()
        self.root.symlink_to(self.case_dir / snapshot, target_is_directory=True)


def paths_at(root: Path) -> HostPaths:
    """HostPaths with every root under ``root`` (``proc``, ``sys``, ``run``, ``cgroup``)."""
    return HostPaths(proc=root / "proc", sys=root / "sys", run=root / "run", cgroup=root / "cgroup")


def two_snapshots(
    collector: Collector, tree: HostTree, clock: FakeClock | None = None
) -> tuple[list[_Sample], list[_Sample]]:
    """Collect at t0, move the tree to t1 and the clock on by :data:`INTERVAL_S`, collect again."""
    first = list(collector.collect(NOW))
    tree.advance()
    if clock is not None:
        clock.advance(INTERVAL_S)
    second = list(collector.collect(LATER))
    return first, second


def real_host_two_reads(collector: Collector, pause_s: float = 0.2) -> list[_Sample]:
    """Two reads of this machine's real files, ``pause_s`` apart; the second read's samples."""
    collector.collect(NOW)
    time.sleep(pause_s)
    return list(collector.collect(LATER))


def real_host(proc_file: str) -> HostPaths:
    """This machine's paths, for a test that reads ``/proc/<proc_file>``: skipped where it is absent."""
    paths = HostPaths()
    if not (paths.proc / proc_file).exists():
        pytest.skip(f"no /proc/{proc_file} here")
    return paths


def assert_fails_naming_the_file(collector: Collector, match: str) -> None:
    """``collect`` raises naming the bad file (``match``), and a run records it as its error."""
    with pytest.raises(ValueError, match=match):
        collector.collect(NOW)
    assert run_collector(collector, NOW).error is not None
