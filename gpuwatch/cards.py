"""GPU cards and their MIG profiles, from one data file (``cards.json``).

Right-sizing advice needs to know what a job could have asked for instead: a MIG slice of its
card, or a card of the same architecture with less memory. NVML names a card
(``NVIDIA H100 80GB HBM3``, ``NVIDIA H200``, ``NVIDIA A100-SXM4-40GB``) and reports its memory;
:func:`card_for` matches both to a row of the table, so a variant the table lacks matches
nothing and gets no advice rather than a wrong one.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

_DATA = Path(__file__).with_name("cards.json")
GIB = 2**30
#: usable GiB per GB of a card's or profile's name (an "80GB" H100 reports 79.6 GiB)
USABLE_GIB_PER_NAMED_GB = 0.95
#: a card matches a GPU whose reported memory is within this share of the card's named size
_MEMORY_TOLERANCE = 0.1


@dataclass(frozen=True)
class MigProfile:
    profile: str  # "1g.10gb"
    memory_gb: int
    compute_sevenths: int

    @property
    def usable_bytes(self) -> int:
        return int(self.memory_gb * USABLE_GIB_PER_NAMED_GB * GIB)

    @property
    def compute_share(self) -> float:
        return self.compute_sevenths / 7


@dataclass(frozen=True)
class Card:
    name: str  # "H100 80GB"
    family: str  # "H100": what the NVML name must contain
    architecture: str  # cards of one architecture run the same kernels at about the same speed
    memory_gb: int
    mig: tuple[MigProfile, ...]

    @property
    def usable_bytes(self) -> int:
        return int(self.memory_gb * USABLE_GIB_PER_NAMED_GB * GIB)


@functools.lru_cache(maxsize=1)
def cards() -> tuple[Card, ...]:
    """Every card of the data file, smallest memory first."""
    raw = json.loads(_DATA.read_text())
    out = [
        Card(
            name=c["name"],
            family=c["family"],
            architecture=c["architecture"],
            memory_gb=c["memory_gb"],
            mig=tuple(MigProfile(p["profile"], p["memory_gb"], p["compute_sevenths"]) for p in c["mig"]),
        )
        for c in raw["cards"]
    ]
    return tuple(sorted(out, key=lambda c: (c.memory_gb, c.name)))


def card_for(model: str | None, memory_total_bytes: int | None) -> Card | None:
    """The card an NVML name and memory size describe; None when the table has no such card."""
    if not model or not memory_total_bytes:
        return None
    words = model.replace("-", " ").upper().split()
    gib = memory_total_bytes / GIB  # NVML reports close to the named size: 79.6 GiB for "80GB"
    near = [
        c
        for c in cards()
        if c.family.upper() in words and abs(gib - c.memory_gb) <= _MEMORY_TOLERANCE * c.memory_gb
    ]
    return min(near, key=lambda c: abs(gib - c.memory_gb), default=None)
