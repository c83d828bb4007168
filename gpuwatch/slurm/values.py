"""Decoders for the ways Slurm writes one scalar, shared by the JSON and text parsers.

Slurm 22.05 (OpenAPI v0.0.38) writes numbers as plain JSON numbers and times as Unix epochs,
with 0 meaning "not set". Slurm 23.02+ data_parser (v0.0.39 and later) wraps most numbers in
``{"set": bool, "infinite": bool, "number": N}`` (the C ``NO_VAL``/``INFINITE`` sentinels made
explicit). The text commands (``scontrol``, ``sacct -P``) write times as local
``YYYY-MM-DDTHH:MM:SS`` and durations as ``[D-]HH:MM:SS``; "Unknown", "None", "N/A",
"(null)" and "UNLIMITED" mean "no value". Every decoder returns ``None`` rather than raising.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timezone, tzinfo
from typing import Any

log = logging.getLogger(__name__)

# C sentinels that leak into the v0.0.38 output as plain numbers (NO_VAL, INFINITE, NO_VAL64...).
_SENTINELS = frozenset({0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF, 0xFFFE, 0xFFFF})
_EMPTY_WORDS = frozenset(
    {"", "unknown", "none", "n/a", "(null)", "null", "unlimited", "infinite", "none assigned"}
)


def number(value: Any) -> int | float | None:
    """A plain number, or the number inside ``{"set", "infinite", "number"}``; else ``None``.

    ``set: false`` and ``infinite: true`` both give ``None``: neither is a usable quantity.
    """
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int) and value in _SENTINELS:
        return None
    return value


def integer(value: Any) -> int | None:
    """:func:`number` as an ``int`` (floats such as ``billable_tres`` are truncated)."""
    n = number(value)
    return None if n is None else int(n)


def positive_int(value: Any) -> int | None:
    """:func:`integer`, with 0 also meaning "not set" (v0.0.38 ids and epochs use 0 for that)."""
    n = integer(value)
    return n if n else None


def epoch(value: Any) -> datetime | None:
    """A Unix epoch (plain or wrapped) as an aware UTC datetime; 0 and sentinels give ``None``."""
    n = number(value)
    if not n or n < 0:
        return None
    try:
        return datetime.fromtimestamp(n, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def text(value: Any) -> str | None:
    """A non-empty string, or ``None`` for missing/empty/"(null)"-like values."""
    if value is None or isinstance(value, (dict, list)):
        return None
    s = str(value).strip()
    return None if s.lower() in _EMPTY_WORDS else s


def local_time(value: str | None, tz: tzinfo | None = None) -> datetime | None:
    """``2026-12-02T13:30:17`` (Slurm's text time, in the cluster's local zone) as aware UTC.

    ``tz`` is the zone of the machine that printed it; ``None`` means this process's local
    zone, which is right when the command ran here or on a login node in the same zone.
    """
    s = text(value)
    if s is None:
        return None
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        log.debug("unparsable Slurm time %r", s)
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=tz) if tz is not None else dt.astimezone()
    return dt.astimezone(timezone.utc)


_DURATION = re.compile(r"^(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+(?:\.\d+)?))?$")


def duration_s(value: str | None) -> int | None:
    """Slurm durations as seconds: ``D-HH:MM:SS``, ``D-HH:MM``, ``D-HH``, ``HH:MM:SS``, ``MM:SS``, ``MM``.

    These are the ``sbatch --time`` forms, which ``scontrol``/``sacct`` also print
    (``Elapsed``, ``TimeLimit``, ``RunTime``); ``UNLIMITED``/``Partition_Limit`` give ``None``.
    """
    s = text(value)
    if s is None:
        return None
    m = _DURATION.match(s)
    if not m:
        log.debug("unparsable Slurm duration %r", s)
        return None
    d, a, b, c = m.group("d"), m.group("a"), m.group("b"), m.group("c")
    parts = [int(a), int(b) if b is not None else None, int(float(c)) if c is not None else None]
    if d is not None:  # D-HH[:MM[:SS]]
        hh, mm, ss = parts[0], parts[1] or 0, parts[2] or 0
        return int(d) * 86400 + hh * 3600 + mm * 60 + ss
    if parts[2] is not None:  # HH:MM:SS
        return parts[0] * 3600 + (parts[1] or 0) * 60 + parts[2]
    if parts[1] is not None:  # MM:SS
        return parts[0] * 60 + parts[1]
    return parts[0] * 60  # MM


def string_list(value: Any) -> list[str]:
    """A JSON list of strings, or a single string, as a list; anything else gives ``[]``."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(v) for v in value if isinstance(v, (str, int))]
    return []


def exit_pair(value: str | None) -> tuple[int | None, int | None]:
    """``code:signal`` text (``scontrol`` ``ExitCode=``, ``sacct`` ``ExitCode``) as (code, signal).

    ``3:0`` -> ``(3, None)``; ``0:9`` -> ``(None, 9)``: a job killed by a signal has no exit
    code, the same convention as the JSON parsers use.
    """
    s = text(value)
    if not s:
        return None, None
    code, _, sig = s.partition(":")
    signal = int(sig) if sig.isdigit() and int(sig) else None
    if signal:
        return None, signal
    return (int(code) if code.isdigit() else None), None
