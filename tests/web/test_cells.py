"""Every page formats a figure the same way, and a missing one as ``-``."""

from __future__ import annotations

from datetime import datetime, timezone

from gpuwatch.web.cells import gib, num, pct, when


def test_each_kind_of_figure_and_a_missing_one():
    assert pct(0.125) == "12%" and pct(1.0) == "100%" and pct(0.0) == "0%"
    assert num(2.345) == "2.3" and num(2.345, 2) == "2.35" and num(0) == "0.0"
    assert gib(3 * 2**30 // 2) == "1.5"
    assert when(datetime(2026, 12, 6, 7, 5, 59, tzinfo=timezone.utc)) == "2026-12-06 07:05 UTC"
    assert {pct(None), num(None), gib(None), when(None)} == {"-"}
