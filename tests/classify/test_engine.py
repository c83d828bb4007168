"""Features, thresholds and the verdict store, on both databases."""

from __future__ import annotations

from datetime import timedelta

import pydantic
import pytest

from gpuwatch.classify.engine import RULES_VERSION, classify_job
from gpuwatch.classify.features import job_windows, load_scope, quantile_from_bins
from gpuwatch.classify.runner import evaluate_running
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS, Thresholds
from gpuwatch.sql.rollups import Rollup
from gpuwatch.views import latest_evaluations
from tests.classify import corpus


def _cases(*names: str) -> tuple[corpus.Built, ...]:
    by_name = {c.name: (i, c) for i, c in enumerate(corpus.cases())}
    return tuple(corpus.build(by_name[n][1], by_name[n][0]) for n in names)


def _load(engine, built) -> None:
    corpus.load(engine, built)
    last = max(b.case.now for b in built)
    Rollup(engine, lag=timedelta(0)).run_once(now=last + timedelta(minutes=1))


def test_quantiles_from_histogram():
    assert quantile_from_bins([0] * 11, 0.5) is None
    assert quantile_from_bins([10] + [0] * 10, 0.95) == 0.0
    bins = [6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4]  # 60 % idle samples, 40 % at 90-100 %
    assert quantile_from_bins(bins, 0.5) == 0.0 and quantile_from_bins(bins, 0.95) == 1.0


def test_thresholds_frozen_documented_and_strict():
    with pytest.raises(pydantic.ValidationError):
        Thresholds(no_such_threshold=1)
    with pytest.raises(pydantic.ValidationError):
        DEFAULT_THRESHOLDS.util_low_ratio = 0.3  # type: ignore[misc]
    assert Thresholds(util_low_ratio=0.2).util_low_ratio == 0.2
    for name, info in Thresholds.model_fields.items():
        assert "Source:" in (info.description or ""), name
    assert DEFAULT_THRESHOLDS.sm_active_low_ratio == 0.5  # DCGM
    assert DEFAULT_THRESHOLDS.util_low_ratio == 0.15  # jobstats
    assert DEFAULT_THRESHOLDS.grace_period_s == 600


def test_features_mark_missing_gpm_and_gpus_from_attribution(engine):
    built = _cases("small-a100-no-gpm", "idle-no-slurm-row", "input-cpu-saturated")
    _load(engine, built)
    a100, no_row, h200 = built
    with engine.connect() as conn:
        scope = load_scope(conn, a100.job_id)
        assert scope.gpu_source == "job_gpus" and len(scope.gpus) == 1
        recent, whole = job_windows(conn, scope, a100.case.now, DEFAULT_THRESHOLDS)
        assert recent.kind == "recent" and whole.kind == "job"
        assert recent.end - recent.start == timedelta(minutes=10)
        assert not recent.has_gpm and recent.sm_active is None
        assert {"sm_active", "tensor_active", "sm_occupancy"} <= set(recent.missing)
        assert recent.util_mean == pytest.approx(0.6, abs=0.02)

        scope = load_scope(conn, no_row.job_id)
        assert scope.gpu_source == "attribution" and len(scope.gpus) == 2 and scope.start is not None

        scope = load_scope(conn, h200.job_id)
        recent, _ = job_windows(conn, scope, h200.case.now, DEFAULT_THRESHOLDS)
        assert recent.has_gpm and "sm_active" not in recent.missing
        assert recent.idle_fraction_mean == pytest.approx(0.6, abs=0.01)
        assert recent.burst_util > 0.9 and recent.util_p50 is not None and recent.util_std is not None
        assert recent.cpu_ratio > 0.9 and recent.cpu_allocated_cores == 8
        assert recent.gpu_count == 4 and recent.node_count == 1


def test_rolled_up_edge_limits_the_window(engine):
    (b,) = _cases("idle-all-4-h200")
    corpus.load(engine, (b,))
    Rollup(engine, lag=timedelta(0)).run_once(now=b.case.start + timedelta(minutes=8))
    with engine.connect() as conn:
        recent, _ = job_windows(conn, load_scope(conn, b.job_id), b.case.now, DEFAULT_THRESHOLDS)
    assert recent.end == b.case.start.replace(second=0) + timedelta(minutes=8)


def test_grace_period_threshold_is_honoured(engine):
    (b,) = _cases("idle-all-4-h200")
    _load(engine, (b,))
    assert classify_job(engine, b.job_id, b.case.now)
    assert classify_job(engine, b.job_id, b.case.now, Thresholds(grace_period_s=3600)) == []
    assert classify_job(engine, "no-such-job", b.case.now) == []


def test_evaluate_running_stores_and_reads_back(engine):
    idle, healthy, finished = _cases("idle-one-of-eight", "healthy-training-h200", "none-finished-6min-idle")
    _load(engine, (idle, healthy, finished))
    now = idle.case.now
    results = evaluate_running(engine, now)
    assert set(results) == {idle.job_id, healthy.job_id}  # the finished job is not running
    assert results[idle.job_id][0].cause.value == "idle_allocation"

    def latest():
        with engine.connect() as conn:
            return latest_evaluations(conn)

    stored = latest()
    assert set(stored) == {idle.job_id, healthy.job_id}
    assert {j for j, e in stored.items() if e.shown is not None} == {idle.job_id}
    lead = stored[idle.job_id].window("recent")[0]
    assert lead.cause == "idle_allocation"
    assert lead.rules_version == RULES_VERSION and lead.evaluated_at == now
    assert lead.evidence["signals"]["idle_gpus"] == [f"{next(iter(idle.batches))}/gpu7"]
    assert lead.fix and "1 of 8" in lead.summary
    assert lead.gpu_hours_wasted == pytest.approx(lead.gpu_hours / 8, abs=1e-3)
    fine = stored[healthy.job_id]
    assert [(v.window_kind, v.cause) for v in fine.verdicts] == [("job", "healthy"), ("recent", "healthy")]
    rows = sum(len(e.verdicts) for e in stored.values())

    # the same evaluation again replaces its rows; a later one becomes the latest
    evaluate_running(engine, now)
    assert sum(len(e.verdicts) for e in latest().values()) == rows
    evaluate_running(engine, now + timedelta(minutes=1))
    assert {e.evaluated_at for e in latest().values()} == {now + timedelta(minutes=1)}


def test_short_running_job_is_not_judged(engine):
    (b,) = _cases("none-running-9min-idle")
    _load(engine, (b,))
    assert classify_job(engine, b.job_id, b.case.now) == []
    # the same data judged later (a finished job's age counts to its end, a running one's to now)
    later = classify_job(engine, b.job_id, b.case.now + timedelta(minutes=2))
    assert later[0].cause.value == "cpu_only"  # GPU never touched, job CPUs at 50 % of 8 cores


def test_idle_minutes_at_the_edges_are_a_phase_between_them_gaps(engine):
    """One GPU over ten minutes: idle, busy x3, idle, busy x2, idle x3. The first and the last
    three idle minutes are edges (a phase); the idle minute between busy ones is a gap."""
    from datetime import datetime, timezone

    from gpuwatch.classify.features import window_features
    from gpuwatch.sql.nodes import create_token, get_node
    from gpuwatch.sql.schema import gpu_minutes, job_gpus, slurm_jobs

    t0 = datetime(2026, 12, 5, 9, 0, tzinfo=timezone.utc)
    create_token(engine, "edge-n1")
    with engine.connect() as conn:
        node_id = get_node(conn, "edge-n1").id
    idle = [True, False, False, False, True, False, False, True, True, True]
    with engine.begin() as conn:
        conn.execute(
            slurm_jobs.insert().values(
                job_id="77001",
                source="test",
                state="RUNNING",
                start_at=t0,
                gpus=1,
                first_seen_at=t0,
                updated_at=t0,
            )
        )
        conn.execute(job_gpus.insert().values(job_id="77001", node="edge-n1", gpu_index=0))
        conn.execute(
            gpu_minutes.insert(),
            [
                {
                    "node_id": node_id, "gpu_index": 0, "minute": t0 + timedelta(minutes=k), "samples": 6,
                    "lost_samples": 0, "util_gpu_ratio_sum": 0.0 if is_idle else 5.7, "util_gpu_ratio_n": 6,
                    "util_gpu_idle_fraction_ratio_sum": 6.0 if is_idle else 0.0,
                    "util_gpu_idle_fraction_ratio_n": 6, "util_bin_0": 6 if is_idle else 0,
                    "util_bin_10": 0 if is_idle else 6,
                }
                for k, is_idle in enumerate(idle)
            ],
        )  # fmt: skip
    with engine.connect() as conn:
        scope = load_scope(conn, "77001")
        f = window_features(conn, scope, "job", t0, t0 + timedelta(minutes=10), DEFAULT_THRESHOLDS)
        short = window_features(
            conn, scope, "recent", t0 + timedelta(minutes=6), t0 + timedelta(minutes=10), DEFAULT_THRESHOLDS
        )
    assert f.idle_fraction_mean == 0.5 and f.idle_edge_share == 0.4
    assert f.gap_fraction == pytest.approx(1 / 6, abs=1e-3) and f.active_span_minutes == 6
    # the last four minutes: one busy minute, then idle: a minute of work shows no duty cycle
    assert short.active_span_minutes == 1 and short.idle_edge_share == 0.75


def test_page_cache_is_left_out_of_the_memory_limit_and_fp64_sm_clock_reach_the_features(engine):
    """A cgroup full of page cache (0.98 of its limit, 0.6 of it cache) is at 0.38 for the
    classifier; the same without a cache figure stays at 0.98. FP64 activity and the SM clock
    of the simulated cards arrive in the window's features."""
    built = _cases("input-iowait-page-cache-full", "healthy-fp64-cfd-h100", "hostmem-near-oom-8gpu")
    _load(engine, built)
    cache, cfd, oom = built
    with engine.connect() as conn:

        def whole(b: corpus.Built):
            return job_windows(conn, load_scope(conn, b.job_id), b.case.now, DEFAULT_THRESHOLDS)[1]

        assert whole(cache).job_memory_ratio == pytest.approx(0.38, abs=0.01)
        assert whole(cache).job_memory_used_max_bytes > 0.97 * whole(cache).job_memory_limit_bytes
        assert whole(oom).job_memory_ratio == pytest.approx(0.99, abs=0.01)
        f = whole(cfd)
        assert f.fp64_active == pytest.approx(0.45, abs=0.02) and f.tensor_active == pytest.approx(
            0.0, abs=0.01
        )
        assert all(g.sm_clock_ratio == pytest.approx(0.95, abs=0.02) for g in f.gpus)
