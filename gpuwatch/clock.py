"""The one clock: aware now in UTC, which every sample, batch and stored row is stamped with.

Tests and the demo's virtual clock replace it by passing their own ``clock`` callable.
"""

from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> datetime:
    """Aware now in UTC (never naive: storage compares instants)."""
    return datetime.now(timezone.utc)
