"""Throttled: clocks held down (thermal, hardware slowdown, a clock setting, a site power cap) in
most samples of a GPU.

The power limiter alone (``sw_power_cap``) is the card at work when its enforced limit is its
default: a GPU at full load runs at its power limit, and an H200 training at its default 700 W
reported ``sw_power_cap`` in nearly every sample with its SMs 85 % active
(tests/gpu/fixtures/h200/run3). It counts only where the enforced limit is below the card's
default limit by more than ``power_cap_ratio`` (someone ran ``nvidia-smi -pl``); where the
default is not reported, power caps are not judged. The rollup counts the samples with any
reason but ``gpu_idle`` and, of those, the samples held by the power limiter alone; it does not
keep the other reasons apart, so "thermal" is told by the max temperature. The mean SM clock
over the card's max says how much speed the throttled GPUs had (the power limiter's samples
included: an H200 at full load at its default limit ran at 0.74 of its max clock in
tests/gpu/fixtures/h200/probe). No GPU-hours are put down as wasted: the node is at fault, not
the job."""

from __future__ import annotations

from gpuwatch.classify.features import GpuFeatures, WindowFeatures
from gpuwatch.classify.verdict import TEXTS, Cause, CauseText, Evidence, Verdict, make_verdict, pct
from gpuwatch.config.thresholds import Thresholds

#: the same summary; the fix names the power cap and its owner
POWER_CAP_TEXT = CauseText(
    TEXTS[Cause.THROTTLED].summary,
    "The GPU's power limit is set below the card's default (nvidia-smi -pl or a DCGM power policy), "
    "so its clocks drop at full load: if that is not site policy, have an admin restore the default "
    "(nvidia-smi -i <gpu> -pl <default W>); the job itself is not at fault.",
)


def _capped(g: GpuFeatures, t: Thresholds) -> bool:
    """Held by the power limiter under a limit set below the card's default."""
    return (
        g.power_cap_ratio is not None
        and g.power_cap_ratio < t.power_cap_ratio
        and (g.throttled_share or 0.0) >= t.throttled_share_ratio
    )


def rule(f: WindowFeatures, t: Thresholds) -> Verdict | None:
    ev = Evidence()
    ev.thresholds["throttled_share_ratio"] = t.throttled_share_ratio
    ev.thresholds["thermal_celsius"] = t.thermal_celsius
    ev.thresholds["power_cap_ratio"] = t.power_cap_ratio
    busy = [g for g in f.gpus if not g.idle]
    slowed = [g for g in busy if (g.clock_limited_share or 0.0) >= t.throttled_share_ratio]
    capped = [g for g in busy if g not in slowed and _capped(g, t)]
    hot = slowed + capped
    if not hot:
        return None
    if any(g.power_default_limit_watts is None for g in busy):
        ev.lacks("power_default_limit", "the default power limit was not reported: power caps not judged")
    shares = {g.gpu: g.clock_limited_share if g in slowed else g.throttled_share for g in hot}
    ev.signal("throttled_share", shares)
    temps = [g.temperature_max_celsius for g in slowed if g.temperature_max_celsius is not None]
    ev.signal("temperature_max_celsius", max(temps) if temps else None)
    ev.signal("power_ratio", {g.gpu: g.power_ratio for g in hot})
    ev.signal("power_cap_ratio", {g.gpu: g.power_cap_ratio for g in hot})
    thermal = bool(temps) and max(temps) >= t.thermal_celsius
    clocks = [g.sm_clock_ratio for g in hot if g.sm_clock_ratio is not None]
    ev.signal("sm_clock_ratio", {g.gpu: g.sm_clock_ratio for g in hot})
    clock_part = ""
    if clocks:
        clock_part = f", SM clock at {pct(min(clocks))} of its max"
    else:
        ev.lacks("sm_clock", "the SM clock was not reported: the speed lost is not measured")
    share = sum(v or 0.0 for v in shares.values()) / len(hot)
    if thermal:
        reason = f"thermal, up to {max(temps):.0f} °C"
    elif slowed:
        reason = "hardware slowdown or clock limit"
    else:
        reason = _cap_reason(capped)
    ev.values.update(throttled=len(hot), reason=reason, share_pct=pct(share), clock_part=clock_part)
    text = POWER_CAP_TEXT if not slowed else None
    return make_verdict(Cause.THROTTLED, 0.8 if thermal else 0.7, f, ev, 0.0, text)


def _cap_reason(capped: list[GpuFeatures]) -> str:
    """``power capped at 450 W, 64% of the card's 700 W default`` (the deepest cap)."""
    g = min(capped, key=lambda c: c.power_cap_ratio or 1.0)
    return (
        f"power capped at {g.power_limit_watts:.0f} W, {pct(g.power_cap_ratio)} of the card's "
        f"{g.power_default_limit_watts:.0f} W default"
    )
