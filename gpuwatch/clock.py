"""The one clock: aware now in UTC, which every sample, batch and stored row is stamped with.

Tests and the demo's virtual clock replace it by passing their own ``clock`` callable.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
#: the longest span a period may reach back: far beyond any data, well inside what a date holds
MAX_SPAN = timedelta(days=100 * 365)


def utcnow() -> datetime:
    """Aware now in UTC (never naive: storage compares instants)."""
    return datetime.now(timezone.utc)


def parse_span(text: str) -> timedelta:
    """``90s``, ``30m``, ``2h``, ``7d``, ``1w`` -> a timedelta; ValueError saying how otherwise
    (the CLI's ``--since`` and the web view's ``?since=`` read spans alike)."""
    m = _SPAN.match(text)
    if not m:
        raise ValueError(f"{text!r}: use a number and a unit s/m/h/d/w, e.g. 2h or 7d")
    seconds = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if seconds > MAX_SPAN.total_seconds():
        raise ValueError(f"{text!r}: at most {MAX_SPAN.days // 365} years back")
    return timedelta(seconds=seconds)
