"""Fallbacks when no cause rule fires: ``unknown_low`` for a window that is low (util ≤ the
jobstats red line, SM activity below DCGM's 0.5, or duty-cycling) listing what was missing
and which rules could not check; otherwise ``healthy``."""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.rules.input_bound import duty_cycling
from gpuwatch.classify.verdict import Cause, Evidence, Skipped, Verdict, efficiency, make_verdict
from gpuwatch.config.thresholds import Thresholds


def is_low(f: WindowFeatures, t: Thresholds, ev: Evidence) -> bool:
    util_low = ev.check("util_mean", f.util_mean, "<=", "util_low_ratio", t.util_low_ratio)
    sm_low = ev.check("sm_active", f.sm_active, "<", "sm_active_low_ratio", t.sm_active_low_ratio)
    duty = duty_cycling(f, t, ev)
    return bool(util_low or sm_low or duty)


def _not_checked(ev: Evidence, skipped: list[Skipped]) -> None:
    for s in skipped:
        ev.notes.append(f"{s.cause.value} not checked: {s.reason}")


def rule(f: WindowFeatures, t: Thresholds, skipped: list[Skipped] | None = None) -> Verdict | None:
    ev = Evidence()
    if not is_low(f, t, ev):
        return None
    for name in f.missing:
        ev.lacks(name)
    _not_checked(ev, skipped or [])
    missing = ", ".join(ev.missing)
    ev.values.update(missing_part=f" (missing: {missing})" if missing else "")
    return make_verdict(Cause.UNKNOWN_LOW, 0.5, f, ev, 1 - efficiency(f))


def healthy(f: WindowFeatures, t: Thresholds, skipped: list[Skipped] | None = None) -> Verdict:
    ev = Evidence()
    is_low(f, t, ev)
    for name in f.missing:
        ev.lacks(name)
    _not_checked(ev, skipped or [])
    confidence = 0.8 if f.has_gpm else 0.6
    return make_verdict(Cause.HEALTHY, confidence, f, ev, 0.0)
