"""How a figure reads in a page's table cell: one format per kind of figure on every page,
and ``-`` where there is none."""

from __future__ import annotations

from datetime import datetime


def pct(value: float | None) -> str:
    """A ratio as a whole percent: ``0.125`` -> ``12%``."""
    return "-" if value is None else f"{100 * value:.0f}%"


def num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def cards(value: float) -> str:
    """A count of GPUs in cards: ``3`` whole, ``2.4`` where MIG instances add shares of a card."""
    rounded = round(value, 1)
    return f"{rounded:.0f}" if rounded == int(rounded) else f"{rounded:.1f}"


def gib(value: int | None) -> str:
    """Bytes in GiB, one decimal."""
    return "-" if value is None else f"{value / 2**30:.1f}"


def when(value: datetime | None) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M} UTC"
