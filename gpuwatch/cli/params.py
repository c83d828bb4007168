"""The CLI's shared option values: row limits, minute windows and times, each refusing what a
database integer or datetime arithmetic cannot hold with one line of usage error (exit 2),
never a driver's overflow or a traceback."""

from __future__ import annotations

from datetime import datetime, timezone

import click

from gpuwatch.clock import MAX_SPAN

#: ``--limit N``: at least one row, and no more than a database's integer holds
LIMIT = click.IntRange(1, 2**31 - 1)
#: a window in minutes (``--window``, ``processes --since``): one minute to :data:`MAX_SPAN`
MINUTES = click.IntRange(1, int(MAX_SPAN.total_seconds() // 60))
#: the times a command takes: room for :data:`MAX_SPAN` back and a year ahead of either end
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9000, 1, 1, tzinfo=timezone.utc)


def parse_time(text: str, param_hint: str, *, zone_required: bool) -> datetime:
    """An ISO 8601 time (``2026-12-01T08:00Z``, ``2026-12-01 08:00:00+01:00``) as an aware
    datetime. Without a zone it is refused where ``zone_required``, else taken as UTC (the
    times every table prints). Outside :data:`EARLIEST` .. :data:`LATEST`: refused."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: use an ISO 8601 time, e.g. 2026-12-01T08:00Z", param_hint=param_hint
        ) from None
    if value.tzinfo is None:
        if zone_required:
            raise click.BadParameter(f"{text!r}: give a time zone (Z or +01:00)", param_hint=param_hint)
        value = value.replace(tzinfo=timezone.utc)
    if not EARLIEST <= value < LATEST:
        raise click.BadParameter(
            f"{text!r}: give a time from {EARLIEST.year} to {LATEST.year - 1}", param_hint=param_hint
        )
    return value
