"""The labelled corpus: every case stored, rolled up and classified on SQLite and PostgreSQL.

``pytest -s`` prints the confusion matrix (rows: label, columns: the recent window's leading
verdict); a failing accuracy assertion carries it too.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta

import pytest
import sqlalchemy as sa

from gpuwatch.classify.engine import classify_job, primary
from gpuwatch.classify.verdict import Cause
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.rollups import Rollup
from tests.classify import corpus

MIN_ACCURACY = 0.95
LABELS = [c.value for c in Cause] + ["none"]

#: dialect -> case name -> (label, predicted, every verdict as comparable data)
_RESULTS: dict[str, dict[str, tuple[str, str, list]]] = {}


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
    with engine.connect() as conn:
        for b in built:
            found = classify_job(conn, b.job_id, b.case.now)
            lead = primary(found)
            results[b.case.name] = (b.case.label, lead.cause.value if lead else "none", _comparable(found))
    _RESULTS[dialect] = results
    return results


def confusion_matrix(results: dict[str, tuple[str, str, list]]) -> str:
    counts = Counter((label, got) for label, got, _ in results.values())
    used = [name for name in LABELS if any(name in key for key in counts)]
    short = {name: name[:8] for name in used}
    width = max(len(n) for n in used)
    lines = [" " * (width + 2) + " ".join(f"{short[n]:>8}" for n in used)]
    for label in used:
        cells = " ".join(f"{counts.get((label, got), 0) or '.':>8}" for got in used)
        lines.append(f"{label:<{width}}  {cells}")
    right = sum(1 for label, got, _ in results.values() if label == got)
    lines.append(f"accuracy {right}/{len(results)} = {right / len(results):.1%}")
    wrong = [f"  {name}: {label} -> {got}" for name, (label, got, _) in results.items() if label != got]
    if wrong:
        lines += ["misclassified:", *wrong]
    return "\n".join(lines)


def test_corpus_has_five_cases_per_cause():
    per_label = Counter(case.label for case in corpus.cases())
    for cause in Cause:
        assert per_label[cause.value] >= 5, (cause, per_label)
    assert per_label["none"] >= 1


def test_corpus_accuracy(engine):
    results = run_corpus(engine)
    matrix = confusion_matrix(results)
    print(f"\nclassifier corpus on {engine.dialect.name}:\n{matrix}")
    right = sum(1 for label, got, _ in results.values() if label == got)
    assert right / len(results) >= MIN_ACCURACY, matrix


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
