"""Throttled: clocks held down (power cap, thermal or HW slowdown) in most samples of a GPU.

The rollup counts samples with any clocks-event reason except ``gpu_idle``; it does not keep
the reasons apart nor the SM clock, so "thermal" is told by the max temperature."""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import Cause, Evidence, Verdict, make_verdict, pct
from gpuwatch.config.thresholds import Thresholds


def rule(f: WindowFeatures, t: Thresholds) -> Verdict | None:
    ev = Evidence()
    ev.thresholds["throttled_share_ratio"] = t.throttled_share_ratio
    ev.thresholds["thermal_celsius"] = t.thermal_celsius
    hot = [
        g
        for g in f.gpus
        if g.throttled_share is not None and g.throttled_share >= t.throttled_share_ratio and not g.idle
    ]
    if not hot:
        return None
    ev.signal("throttled_share", {g.gpu: g.throttled_share for g in hot})
    temps = [g.temperature_max_celsius for g in hot if g.temperature_max_celsius is not None]
    ev.signal("temperature_max_celsius", max(temps) if temps else None)
    ev.signal("power_ratio", {g.gpu: g.power_ratio for g in hot})
    thermal = bool(temps) and max(temps) >= t.thermal_celsius
    ev.lacks("sm_clock", "SM clocks and per-reason counts are not rolled up; the clock loss is not measured")
    share = sum(g.throttled_share or 0.0 for g in hot) / len(hot)
    reason = f"thermal, up to {max(temps):.0f} °C" if thermal else "power cap or clock limit"
    ev.values.update(throttled=len(hot), reason=reason, share_pct=pct(share))
    return make_verdict(Cause.THROTTLED, 0.8 if thermal else 0.7, f, ev, 0.0)
