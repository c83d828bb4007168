"""GRES and TRES strings: which GPUs a job holds on a node, and what it was allocated.

``gres_detail`` (``squeue --json``, one entry per allocated node, in node order) and
``GRES=`` (``scontrol show job -d``) look like ``gpu:fake:2(IDX:0-1)``, ``gpu:a100:4(IDX:0,2-3)``,
``gpu(IDX:1)``, ``gpu:a100:1(IDX:N/A)`` (nothing on that node), or ``gpu:a100:2(CNT:2)`` when
the GRES has no device files (seen in ``gres_ctld_job_build_details``, Slurm 21.08+). One
entry may hold several GRES separated by commas, which also appear inside ``IDX:``.

**MIG.** On a node with cards in MIG mode each MIG instance is a GRES device of its own
(``AutoDetect=nvml`` finds them; a hand-written gres.conf lists them as ``Name=gpu
Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21``), typed by its profile
(``1g.10gb``, or ``<card>_1g.10gb`` as autodetect names it). ``IDX`` then counts the node's GPU
GRES devices, whole cards and instances alike, in gres.conf order: ``gpu:1g.10gb:1(IDX:3)`` is
the node's fourth GPU device, not card 3 and not a slot NVML could name. :func:`is_mig_type`
tells such a type apart and :func:`gpu_indices` leaves its indices out (see docs/gpu.md, MIG).

TRES strings (``tres_alloc_str``, ``TRES=``, ``sacct`` ``AllocTRES``) look like
``cpu=4,mem=1G,node=1,billing=4,gres/gpu=2,gres/gpu:a100=2``; ``mem`` carries a unit
(K/M/G/T/P, powers of 1024; a bare number is MiB, Slurm's memory unit) and is returned in bytes.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

log = logging.getLogger(__name__)

_UNITS = {"": 1 << 20, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_MEMORY = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<u>[KMGTP]?)(?:i?B)?\s*$", re.IGNORECASE)


def memory_bytes(value: str | int | float | None, default_unit: str = "M") -> int | None:
    """``1G``/``256M``/``1.50G``/``1024`` as bytes; a bare number is in ``default_unit`` (MiB).

    Slurm's memory sizes are binary (``1G`` = 1024 MiB) in every command that prints them.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value * _UNITS[default_unit.upper()])
    m = _MEMORY.match(value)
    if not m:
        return None
    unit = m.group("u").upper() or default_unit.upper()
    return int(float(m.group("n")) * _UNITS[unit])


@dataclass(frozen=True)
class GresAlloc:
    """One GRES of one node: ``gpu:a100:2(IDX:0-1)`` -> name gpu, type a100, count 2, (0, 1)."""

    name: str
    type: str | None
    count: int | None
    indices: tuple[int, ...] | None  # None when Slurm gave no IDX (CNT form, N/A)


def _split_outside_parens(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_index_list(spec: str) -> tuple[int, ...] | None:
    """``0,2-3`` -> ``(0, 2, 3)``; ``N/A``/empty -> ``None``; garbage -> ``None`` (logged)."""
    spec = spec.strip()
    if not spec or spec.upper() == "N/A":
        return None
    out: list[int] = []
    for item in spec.split(","):
        lo, sep, hi = item.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            log.debug("bad GRES index list %r", spec)
            return None
        out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    return tuple(out)


_HEAD = re.compile(r"^(?P<name>[A-Za-z0-9_./-]+)(?::(?P<a>[^:()]+))?(?::(?P<b>[^:()]+))?")


def parse_gres_entry(entry: str) -> list[GresAlloc]:
    """All GRES in one ``gres_detail`` entry or ``GRES=`` value (see module doc for forms)."""
    out: list[GresAlloc] = []
    for item in _split_outside_parens(entry or ""):
        head = _HEAD.match(item)
        if not head:
            log.debug("unparsable GRES %r", item)
            continue
        name, a, b = head.group("name"), head.group("a"), head.group("b")
        # name:type:count, name:count, name:type, or name
        gtype: str | None = None
        count: int | None = None
        if b is not None:
            gtype, count = a, int(b) if b.isdigit() else None
        elif a is not None:
            if a.isdigit():
                count = int(a)
            else:
                gtype = a
        indices: tuple[int, ...] | None = None
        for group in re.findall(r"\(([^()]*)\)", item):
            key, _, val = group.partition(":")
            key = key.strip().upper()
            if key == "IDX":
                indices = parse_index_list(val)
            elif key == "CNT" and count is None and val.strip().isdigit():
                count = int(val)
        if count is None and indices is not None:
            count = len(indices)
        out.append(GresAlloc(name=name, type=gtype, count=count, indices=indices))
    return out


#: a MIG profile in a GRES type: ``1g.10gb``, ``3g.40gb``, ``1g.18gb+me``, ``1c.3g.20gb``,
#: autodetect's ``nvidia_h100_80gb_hbm3_1g.10gb``
_MIG_PROFILE = re.compile(r"(?:^|[^0-9a-z])\d+g\.\d+gb(?:$|[^0-9a-z])", re.IGNORECASE)


def is_mig_type(gres_type: str | None) -> bool:
    """Whether a GPU GRES type names a MIG profile (``1g.10gb``, ``a100_3g.40gb``, ...)."""
    return bool(gres_type) and _MIG_PROFILE.search(gres_type or "") is not None


def holds_mig(entry: str) -> bool:
    """Whether one node's GRES entry holds a MIG instance (a ``gpu`` GRES typed by a profile)."""
    return any(g.name == "gpu" and is_mig_type(g.type) for g in parse_gres_entry(entry))


def gpu_indices(entry: str) -> tuple[int, ...]:
    """The card indices of one node's GRES entry, all whole-card GPU types together, sorted.

    A MIG-typed GPU GRES is left out: its ``IDX`` is a place in the node's GPU device list,
    not a card (module doc), so reading it as one would name the wrong card.
    """
    idx: set[int] = set()
    for g in parse_gres_entry(entry):
        if g.name == "gpu" and g.indices and not is_mig_type(g.type):
            idx.update(g.indices)
    return tuple(sorted(idx))


def gpu_count(entry: str) -> int:
    """Number of GPUs in one node's GRES entry (IDX length, else the count)."""
    total = 0
    for g in parse_gres_entry(entry):
        if g.name == "gpu":
            total += len(g.indices) if g.indices is not None else (g.count or 0)
    return total


def parse_tres(value: str | None) -> dict[str, int]:
    """A TRES string as ``{"cpu": 4, "mem": <bytes>, "gres/gpu": 2, ...}``.

    Unparsable items are skipped (logged), so a new TRES kind cannot break a sync.
    """
    out: dict[str, int] = {}
    if not value:
        return out
    for item in value.split(","):
        key, sep, raw = item.strip().partition("=")
        if not sep or not key:
            continue
        key = key.strip()
        raw = raw.strip()
        n = memory_bytes(raw) if key in ("mem", "vmem") else _tres_number(raw)
        if n is None:
            log.debug("unparsable TRES item %r", item)
            continue
        out[key] = n
    return out


def _tres_number(raw: str) -> int | None:
    """TRES counts: plain ints, occasionally floats (billing) or with a unit suffix (fs/disk)."""
    if raw.isdigit():
        return int(raw)
    try:
        return int(float(raw))
    except ValueError:
        return memory_bytes(raw, default_unit="")  # e.g. fs/disk=10G -> bytes


def gpus_from_tres(tres: dict[str, int]) -> int | None:
    """``gres/gpu``, else the sum of the typed ``gres/gpu:<type>`` counts; ``None`` if neither.

    Slurm puts both the untyped total and per-type counts in TRES when types are tracked.
    """
    if "gres/gpu" in tres:
        return tres["gres/gpu"]
    typed = [v for k, v in tres.items() if k.startswith("gres/gpu:")]
    return sum(typed) if typed else None
