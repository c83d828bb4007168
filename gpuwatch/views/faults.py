"""A GPU's faults over a span in words: the same sentence on the node page, the job page,
``gpuwatch job ID`` and its plot."""

from __future__ import annotations

from gpuwatch.classify.xid import describe, owner_of


def fault_text(codes: tuple[int, ...], lost_samples: int) -> str | None:
    """``XID 79 (GPU has fallen off the bus); admin; lost 12 sample(s)``: a GPU's XIDs with who
    owns them (``classify/xid.py``) and the samples it sent as lost; None when nothing went wrong."""
    parts = []
    if codes:
        parts.append(f"{describe(codes)}; {owner_of(codes).value}")
    if lost_samples:
        parts.append(f"lost {lost_samples} sample(s)")
    return "; ".join(parts) or None


class GpuFaults:
    """A GPU's record over a span (the job page's, the node page's) that carries its XIDs and the
    samples it sent as lost, and so says its faults in words."""

    xid_codes: tuple[int, ...]
    lost_samples: int

    @property
    def fault(self) -> str | None:
        """``XID 79 (GPU has fallen off the bus); admin`` or ``lost 12 sample(s)``; None when fine."""
        return fault_text(self.xid_codes, self.lost_samples)
