"""Who owns an XID: the job's program, or the node (driver, GPU, board).

From NVIDIA's Xid catalog for Ampere and newer (docs.nvidia.com/deploy/xid-errors, "Analyzing
Xid Errors with the Xid Catalog": its "Resolution Bucket (Immediate Action)" column). Codes
whose immediate action is to restart the application and whose usual root cause is the program
(an illegal memory access, an illegal instruction, a channel torn down after one) belong to
the user; codes that need a GPU reset, a node reboot or support belong to the admins. A code
not listed here is taken as the node's: asking an admin to look costs less than a user
hunting a bug that is not theirs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum


class Owner(str, Enum):
    USER = "user"  # the program: fix it and resubmit; the node is fine
    ADMIN = "admin"  # the node: reset, drain, RMA
    NOBODY = "nobody"  # a consequence of something else (a process killed or ended)


@dataclass(frozen=True)
class XidInfo:
    code: int
    meaning: str
    owner: Owner


CATALOG: dict[int, XidInfo] = {
    info.code: info
    for info in (
        XidInfo(13, "graphics engine exception (an illegal instruction or out-of-range access)", Owner.USER),
        XidInfo(31, "GPU memory page fault (an illegal memory access)", Owner.USER),
        XidInfo(43, "GPU stopped processing the program's channel after its fault", Owner.USER),
        XidInfo(45, "channel torn down as its process ended or was killed", Owner.NOBODY),
        XidInfo(48, "double-bit ECC error", Owner.ADMIN),
        XidInfo(63, "ECC row remap or page retirement pending a GPU reset", Owner.ADMIN),
        XidInfo(64, "ECC row remap or page retirement failed", Owner.ADMIN),
        XidInfo(74, "NVLink error", Owner.ADMIN),
        XidInfo(79, "GPU has fallen off the bus", Owner.ADMIN),
        XidInfo(92, "high single-bit ECC error rate", Owner.ADMIN),
        XidInfo(94, "contained ECC error (the application was stopped)", Owner.ADMIN),
        XidInfo(95, "uncontained ECC error", Owner.ADMIN),
        XidInfo(119, "GSP RPC timeout", Owner.ADMIN),
        XidInfo(120, "GSP error", Owner.ADMIN),
    )
}


def info(code: int) -> XidInfo:
    """The catalog entry, or an admin-owned "unlisted" one."""
    return CATALOG.get(
        code, XidInfo(code, "not in gpuwatch's catalog: see NVIDIA's Xid catalog", Owner.ADMIN)
    )


def owner_of(codes: Iterable[int]) -> Owner:
    """The node's if any code is; else the user's if any is; else nobody's (or no code at all)."""
    owners = {info(code).owner for code in codes}
    if Owner.ADMIN in owners:
        return Owner.ADMIN
    return Owner.USER if Owner.USER in owners else Owner.NOBODY


def describe(codes: Iterable[int]) -> str:
    """``"XID 31 (GPU memory page fault ...), XID 43 (...)"`` in code order."""
    return ", ".join(f"XID {code} ({info(code).meaning})" for code in sorted(set(codes)))
