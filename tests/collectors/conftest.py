"""Fixtures for the host collector tests; the helpers live in ``hosttrees``."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hosttrees import FIXTURES, FakeClock, HostTree


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def host(tmp_path: Path) -> Callable[[str], HostTree]:
    """``host("typical")``: the case at t0; ``.advance()`` moves it to t1."""

    def make(case: str) -> HostTree:
        case_dir = FIXTURES / case
        assert (case_dir / "t0").is_dir(), f"no fixture case {case_dir}"
        return HostTree(case_dir, tmp_path)

    return make


@pytest.fixture
def copied_host(tmp_path: Path) -> Callable[[str, str], Path]:
    """``copied_host("typical", "t1")``: a writable copy of one snapshot, to break files in."""

    def make(case: str, snapshot: str = "t1") -> Path:
        dest = tmp_path / f"{case}-{snapshot}"
        shutil.copytree(FIXTURES / case / snapshot, dest, symlinks=True)
        return dest

    return make
