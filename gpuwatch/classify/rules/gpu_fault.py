"""GPU fault: XID errors or a GPU lost (fallen off the bus) during the window."""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import Cause, Evidence, Verdict, make_verdict
from gpuwatch.config.thresholds import Thresholds


def rule(f: WindowFeatures, t: Thresholds) -> Verdict | None:
    ev = Evidence()
    lost = ev.check("lost_samples", f.lost_samples, ">=", "fault_min_samples", t.fault_min_samples)
    xid = ev.check("xid_samples", f.xid_samples, ">=", "fault_min_samples", t.fault_min_samples)
    if not (lost or xid):
        return None
    ev.signal("faulty_gpus", list(f.faulty_gpus))
    ev.signal(
        "per_gpu",
        {g.gpu: {"lost": g.lost_samples, "xid": g.xid_samples} for g in f.gpus if g.gpu in f.faulty_gpus},
    )
    ev.notes.append("ECC counters are not rolled up; only XID and lost-GPU samples were checked")
    ev.lacks("ecc_errors")
    ev.values.update(faulty=len(f.faulty_gpus), lost=f.lost_samples, xid=f.xid_samples)
    share = len(f.faulty_gpus) / max(1, f.gpu_count)
    return make_verdict(Cause.GPU_FAULT, 0.97 if lost else 0.9, f, ev, share)
