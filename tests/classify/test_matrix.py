"""The published corpus figures are computed right: precision, recall, healthy jobs flagged."""

from __future__ import annotations

import pytest

from tests.classify.matrix import accuracy, healthy_flagged, report, scores

RESULTS = {
    "a": ("idle_allocation", "idle_allocation", []),
    "b": ("idle_allocation", "cpu_only", []),
    "c": ("cpu_only", "cpu_only", []),
    "d": ("healthy", "healthy", []),
    "e": ("healthy", "small_work", []),
}


def test_precision_and_recall_per_cause() -> None:
    by = {s.label: s for s in scores(RESULTS)}
    assert by["idle_allocation"].recall == 0.5 and by["idle_allocation"].precision == 1.0
    assert by["cpu_only"].recall == 1.0 and by["cpu_only"].precision == 0.5
    assert (
        by["small_work"].cases == 0 and by["small_work"].recall is None and by["small_work"].precision == 0.0
    )
    assert by["healthy"].recall == 0.5 and "gpu_fault" not in by


def test_accuracy_and_healthy_flagged() -> None:
    assert accuracy(RESULTS) == pytest.approx(3 / 5)
    assert healthy_flagged(RESULTS) == ["e"]


def test_report_gives_each_split_and_the_gap() -> None:
    text = report(RESULTS, {"a": "train", "b": "validation", "c": "train", "d": "train", "e": "validation"})
    assert "== train split (3 cases)" in text and "== validation split (2 cases)" in text
    assert "healthy jobs flagged: 1/1 (e)" in text
    assert "train - validation accuracy: +100.0 points" in text
