"""GPU fault: XID errors or a GPU lost (fallen off the bus) during the window — and whose it is.

The XID codes say who acts (:mod:`gpuwatch.classify.xid`, from NVIDIA's Xid catalog): a lost
GPU or any node-owned code (ECC, NVLink, GSP, fallen off the bus) is the node's — drain it;
codes that are the program's own (13, 31, 43: an illegal memory access and what follows it)
get the same cause with the user as owner and a debugging fix; XID 45 alone (a channel torn
down because its process ended or was killed, e.g. by ``scancel``) is nobody's fault and gives
no verdict.
"""

from __future__ import annotations

from gpuwatch.classify import xid
from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import APPLICATION_FAULT_TEXT, Cause, Evidence, Verdict, make_verdict
from gpuwatch.config.thresholds import Thresholds


def rule(f: WindowFeatures, t: Thresholds) -> Verdict | None:
    ev = Evidence()
    lost = ev.check("lost_samples", f.lost_samples, ">=", "fault_min_samples", t.fault_min_samples)
    seen = ev.check("xid_samples", f.xid_samples, ">=", "fault_min_samples", t.fault_min_samples)
    if not (lost or seen):
        return None
    owner = xid.Owner.ADMIN if lost or not f.xid_codes else xid.owner_of(f.xid_codes)
    if owner is xid.Owner.NOBODY:
        return None
    ev.signal("faulty_gpus", list(f.faulty_gpus))
    ev.signal(
        "per_gpu",
        {
            g.gpu: {"lost": g.lost_samples, "xid": g.xid_samples, "codes": list(g.xid_codes)}
            for g in f.gpus
            if g.gpu in f.faulty_gpus
        },
    )
    ev.signal("xid_codes", list(f.xid_codes))
    ev.signal("owner", owner.value)
    ev.notes.append("ECC counters are not rolled up; only XID and lost-GPU samples were checked")
    ev.lacks("ecc_errors")
    reasons = []
    if lost:
        reasons.append(f"GPU lost in {f.lost_samples} samples")
    if f.xid_codes:
        reasons.append(xid.describe(f.xid_codes))
    elif seen:
        reasons.append(f"XIDs in {f.xid_samples} samples, codes not rolled up")
    ev.values.update(faulty=len(f.faulty_gpus), fault_reason="; ".join(reasons))
    share = len(f.faulty_gpus) / max(1, f.gpu_count)
    text = APPLICATION_FAULT_TEXT if owner is xid.Owner.USER else None
    return make_verdict(Cause.GPU_FAULT, 0.97 if lost else 0.9, f, ev, share, text)
