"""The labelled corpus: every case stored, rolled up and classified on SQLite and PostgreSQL.

``pytest -s`` prints each split's confusion matrix (rows: label, columns: the recent window's
leading verdict) with precision and recall per cause; a failing assertion carries them too.
``python -m tests.classify.matrix`` prints the published figures (docs/classification.md).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta

import pytest
import sqlalchemy as sa

from gpuwatch.classify.engine import classify_job, primary
from gpuwatch.classify.runner import store_evaluations
from gpuwatch.classify.verdict import Cause
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.rollups import Rollup
from gpuwatch.views import latest_evaluations
from tests.classify import corpus
from tests.classify.matrix import accuracy, confusion_matrix, healthy_flagged, score_table

MIN_ACCURACY = 0.95

#: dialect -> case name -> (label, predicted, every verdict as comparable data)
_RESULTS: dict[str, dict[str, tuple[str, str, list]]] = {}
#: dialect -> case name -> what the listing shows ("cause@window" or "none")
_LISTED: dict[str, dict[str, str]] = {}


def _comparable(verdicts: list) -> list:
    return [
        (
            v.window_kind,
            v.cause.value,
            v.confidence,
            v.window_start.isoformat(),
            v.window_end.isoformat(),
            v.summary,
            v.gpu_hours,
            v.gpu_hours_wasted,
            v.mean_util_ratio,
            json.dumps(v.evidence, sort_keys=True, default=str),
        )
        for v in verdicts
    ]


def run_corpus(engine: sa.Engine) -> dict[str, tuple[str, str, list]]:
    dialect = engine.dialect.name
    if dialect in _RESULTS:
        return _RESULTS[dialect]
    built = corpus.built_corpus()
    corpus.load(engine, built)
    last = max(b.case.now for b in built)
    Rollup(engine, lag=timedelta(0)).run_once(now=last + timedelta(minutes=1))
    results = {}
    evaluations = {}
    with engine.connect() as conn:
        for b in built:
            found = classify_job(conn, b.job_id, b.case.now)
            lead = primary(found)
            results[b.case.name] = (b.case.label, lead.cause.value if lead else "none", _comparable(found))
            evaluations[b.job_id] = (b.case.now, found)
    # what every listing shows: stored and read back through the read model
    store_evaluations(engine, evaluations)
    with engine.connect() as conn:
        latest = latest_evaluations(conn)
    _LISTED[dialect] = {b.case.name: _listed(latest.get(b.job_id)) for b in built}
    _RESULTS[dialect] = results
    return results


def _listed(evaluation) -> str:
    shown = evaluation.shown if evaluation is not None else None
    return "none" if shown is None else f"{shown.cause}@{shown.window_kind}"


def test_corpus_has_eight_cases_per_cause_and_a_validation_split():
    per_label = Counter(case.label for case in corpus.cases())
    for cause in Cause:
        if cause is not Cause.HEALTHY:
            assert per_label[cause.value] >= 8, (cause, per_label)
    assert per_label["healthy"] >= 15 and per_label["none"] >= 1
    validation = Counter(case.label for case in corpus.cases() if case.split == "validation")
    assert validation["healthy"] >= 5
    assert all(validation[c.value] >= 1 for c in Cause), validation


@pytest.mark.parametrize("split", ["train", "validation"])
def test_corpus_accuracy(engine, split):
    """Each split alone is >= 95 % right, and no healthy job of it is given a cause."""
    part = {name: r for name, r in run_corpus(engine).items() if name in _names(split)}
    text = f"{confusion_matrix(part)}\n{score_table(part)}"
    print(f"\nclassifier corpus, {split} split, on {engine.dialect.name}:\n{text}")
    assert accuracy(part) >= MIN_ACCURACY, text
    assert healthy_flagged(part) == [], text


def _names(split: str) -> set[str]:
    return {c.name for c in corpus.cases() if c.split == split}


def test_the_listing_shows_each_phase_and_no_healthy_job(engine):
    """Where a case says what the listing shows (a phase's verdict, dated), it shows that; and
    no healthy-labelled job is listed with a cause in any window."""
    run_corpus(engine)
    listed = _LISTED[engine.dialect.name]
    expected = {c.name: c.listing for c in corpus.cases() if c.listing is not None}
    assert len(expected) >= 6
    assert {name: listed[name] for name in expected} == expected
    healthy = {c.name for c in corpus.cases() if c.label == "healthy"}
    assert {name: listed[name] for name in healthy if listed[name] != "none"} == {}


def test_corpus_degrades_without_gpm(engine):
    """The A100 no-AMP job is not called no_mixed_precision, and its verdict says why."""
    results = run_corpus(engine)
    for name in ("healthy-noamp-a100-degrades", "healthy-noamp-v100-degrades"):
        _, got, verdicts = results[name]
        assert got == "healthy"
        evidence = json.loads(verdicts[0][-1])
        assert "sm_active" in evidence["missing"] and "tensor_active" in evidence["missing"]
        skipped = {item["cause"]: item["reason"] for item in evidence["not_checked"]}
        assert "no GPM" in skipped["no_mixed_precision"]
    # small work on an A100 is still found, with lower confidence and the gap stated
    _, got, verdicts = results["small-a100-no-gpm"]
    assert got == "small_work" and verdicts[0][2] < 0.8
    assert "sm_active" in json.loads(verdicts[0][-1])["missing"]


def test_corpus_recent_window_catches_idle_after_busy_start(engine):
    results = run_corpus(engine)
    _, got, verdicts = results["idle-after-busy-start"]
    assert got == "idle_allocation"
    job_window = [v for v in verdicts if v[0] == "job"]
    assert job_window and job_window[0][1] != "idle_allocation"  # the whole-job mean hides it
    assert results["none-running-5min"][2] == [] and results["none-finished-6min-idle"][2] == []


@pytest.mark.postgres
def test_corpus_identical_on_sqlite_and_postgres(sqlite_url, pg_url):
    per_dialect = {}
    for url in (sqlite_url, pg_url):
        engine = create_engine(url)
        try:
            if engine.dialect.name not in _RESULTS:
                migrate.upgrade(engine)
            per_dialect[engine.dialect.name] = run_corpus(engine)
        finally:
            engine.dispose()
    lite, pg = per_dialect["sqlite"], per_dialect["postgresql"]
    assert lite.keys() == pg.keys()
    differ = {
        name: [(a, b) for a, b in zip(lite[name][2], pg[name][2], strict=False) if a != b][:1]
        for name in lite
        if lite[name] != pg[name]
    }
    assert not differ, differ
