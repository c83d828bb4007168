"""Formatting shared by every template: numbers by unit suffix, durations, and escaping for
HTML and Slack mrkdwn (evidence is rendered by :func:`gpuwatch.views.evidence_sentences`)."""

from __future__ import annotations

import html
import re
from datetime import datetime, timedelta
from typing import Any

_AGGREGATE = re.compile(r"_(max|min|mean|avg|median|sum|last|p\d+)$")


def duration(seconds: float | timedelta | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds.total_seconds() if isinstance(seconds, timedelta) else seconds)
    if s < 60:
        return f"{s} s"
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min"


def percent(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    value = ratio * 100
    return f"{value:.0f}%" if value >= 10 or value == 0 else f"{value:.1f}%"


def number(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M UTC")


def value_by_unit(key: str, value: Any) -> str:
    """Evidence values read by their key's unit suffix (the metric catalog's convention)."""
    if isinstance(value, bool) or value is None:
        return str(value).lower() if isinstance(value, bool) else "-"
    if isinstance(value, (int, float)):
        key = _AGGREGATE.sub("", key)  # util_gpu_ratio_max reads as a ratio
        if key.endswith("_ratio") or key.endswith("_fraction"):
            return percent(float(value))
        if key.endswith("_bytes"):
            return f"{value / 2**30:,.1f} GiB"
        if key.endswith("_bytes_per_s"):
            return f"{value / 1e9:,.2f} GB/s"
        if key.endswith(("_seconds", "_s")):
            return duration(float(value))
        if isinstance(value, int):
            return f"{value:,}"
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(value_by_unit(key, v) for v in value[:12]) + (" ..." if len(value) > 12 else "")
    return str(value)


def h(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def mrkdwn(text: Any) -> str:
    """Slack's three control characters (https://api.slack.com/reference/surfaces/formatting)."""
    return ("" if text is None else str(text)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
