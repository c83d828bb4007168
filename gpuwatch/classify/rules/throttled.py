"""Throttled: clocks held down (thermal, hardware slowdown, a clock setting) in most samples of a GPU.

The power limiter alone (``sw_power_cap``) does not count: a GPU at full load runs at its power
limit, and an H200 training at its default 700 W reported ``sw_power_cap`` in nearly every
sample with its SMs 85 % active (tests/gpu/fixtures/h200/run3). Whether a limit is the card's
default or a site cap below it needs the default limit, which is not collected, so power caps
are not judged at all. The rollup counts the samples with any reason but ``gpu_idle`` and, of
those, the samples held by the power limiter alone; it does not keep the other reasons apart,
so "thermal" is told by the max temperature. The mean SM clock over the card's max says how
much speed the throttled GPUs had (the power limiter's samples included: an H200 at full load
at its default limit ran at 0.74 of its max clock in tests/gpu/fixtures/h200/probe). No
GPU-hours are put down as wasted: the node is at fault, not the job."""

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
        if g.clock_limited_share is not None
        and g.clock_limited_share >= t.throttled_share_ratio
        and not g.idle
    ]
    if not hot:
        return None
    ev.signal("throttled_share", {g.gpu: g.clock_limited_share for g in hot})
    temps = [g.temperature_max_celsius for g in hot if g.temperature_max_celsius is not None]
    ev.signal("temperature_max_celsius", max(temps) if temps else None)
    ev.signal("power_ratio", {g.gpu: g.power_ratio for g in hot})
    thermal = bool(temps) and max(temps) >= t.thermal_celsius
    clocks = [g.sm_clock_ratio for g in hot if g.sm_clock_ratio is not None]
    ev.signal("sm_clock_ratio", {g.gpu: g.sm_clock_ratio for g in hot})
    clock_part = ""
    if clocks:
        clock_part = f", SM clock at {pct(min(clocks))} of its max"
    else:
        ev.lacks("sm_clock", "the SM clock was not reported: the speed lost is not measured")
    share = sum(g.clock_limited_share or 0.0 for g in hot) / len(hot)
    reason = f"thermal, up to {max(temps):.0f} °C" if thermal else "hardware slowdown or clock limit"
    ev.values.update(throttled=len(hot), reason=reason, share_pct=pct(share), clock_part=clock_part)
    return make_verdict(Cause.THROTTLED, 0.8 if thermal else 0.7, f, ev, 0.0)
