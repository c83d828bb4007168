"""How a figure reads in a page's table cell: one format per kind of figure on every page,
and ``-`` where there is none."""

from __future__ import annotations

from collections.abc import Sequence
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


def table(columns: Sequence[str], rows: Sequence[str], *, empty: str, css: str | None = None) -> str:
    """A page's table: a header of ``columns`` over ``rows`` (each a whole ``<tr>``), or the
    sentence ``empty`` where there are no rows, so every page's tables read alike."""
    if not rows:
        return f"<p>{empty}</p>"
    head = "".join(f"<th>{c}</th>" for c in columns)
    return f"<table{'' if css is None else f' class={css}'}><tr>{head}</tr>{''.join(rows)}</table>"
