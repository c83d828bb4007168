"""Figures compared across two ways of reading the same data (minutes or hours, before and after
retention): floats to 9 significant digits, since an hour adds its minutes in another order."""

from __future__ import annotations

from typing import Any


def rounded(value: Any) -> Any:
    """``value`` with every float in it, however nested in dicts, lists and tuples, to 9
    significant digits."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(rounded(v) for v in value)
    return value
