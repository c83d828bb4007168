"""The low-utilization jobs page's filters: the query string as the listing's filters, and the
form that writes it.

``/jobs?user=alice&cause=idle_allocation&since=7d&state=R,CD&sort=duration&limit=50`` asks what
``gpuwatch jobs --low-util --user alice --cause idle_allocation --since 7d ...`` asks: both map
onto :class:`gpuwatch.views.LowUtilFilters` and read :func:`gpuwatch.views.low_util_jobs`, and
spans and states are parsed by the same functions (:func:`gpuwatch.clock.parse_span`,
:func:`gpuwatch.slurm.model.states_in`). A bad value is one line on the page, never a guess.
``offset`` pages through a long listing ``limit`` rows at a time (:func:`pager`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from html import escape
from urllib.parse import urlencode

from gpuwatch.classify.verdict import Cause
from gpuwatch.clock import parse_span
from gpuwatch.slurm.model import states_in
from gpuwatch.views import SORTS, LowUtilFilters

#: rows a page shows unless ``limit`` says otherwise, and the most it may ask for
PAGE_ROWS = 100
MAX_ROWS = 5000
#: the furthest a page may start (a database's integers end; no listing comes near)
MAX_OFFSET = 10**9
#: the text inputs of the form, in its order
FIELDS = ("user", "account", "partition", "node", "state", "cause", "since")
CAUSES = tuple(c.value for c in Cause if c is not Cause.HEALTHY)


class BadFilter(ValueError):
    """A query value the page cannot use; its text says which and why."""


@dataclass(frozen=True)
class JobQuery:
    filters: LowUtilFilters
    limit: int
    #: rows of the listing skipped before the page's first
    offset: int = 0


def job_query(params: Mapping[str, str], now: datetime) -> JobQuery:
    """The query string as filters; :class:`BadFilter` for a value that means nothing."""
    value = {k: (params.get(k) or "").strip() for k in (*FIELDS, "sort", "limit", "offset", "running")}
    try:
        since = now - parse_span(value["since"]) if value["since"] else None
        states = states_in(value["state"])
    except ValueError as exc:
        raise BadFilter(str(exc)) from None
    if value["cause"] and value["cause"] not in CAUSES:
        raise BadFilter(f"cause {value['cause']!r} is not one of {', '.join(CAUSES)}")
    sort = value["sort"] or "wasted"
    if sort not in SORTS:
        raise BadFilter(f"sort {sort!r} is not one of {', '.join(SORTS)}")
    limit = PAGE_ROWS
    if value["limit"]:
        if not value["limit"].isdigit() or not 1 <= int(value["limit"]) <= MAX_ROWS:
            raise BadFilter(f"limit {value['limit']!r} is not a number from 1 to {MAX_ROWS}")
        limit = int(value["limit"])
    if value["offset"] and not (value["offset"].isdigit() and int(value["offset"]) <= MAX_OFFSET):
        raise BadFilter(f"offset {value['offset']!r} is not a number of rows (0 to {MAX_OFFSET:,})")
    offset = int(value["offset"] or 0)
    filters = LowUtilFilters(
        user=value["user"] or None,
        account=value["account"] or None,
        partition=value["partition"] or None,
        node=value["node"] or None,
        states=states,
        since=since,
        cause=value["cause"] or None,
        running=value["running"] in ("1", "true", "on"),
        sort=sort,
    )
    return JobQuery(filters, limit, offset)


def pager(params: Mapping[str, str], offset: int, limit: int, shown: int, total: int) -> str:
    """Where the page is in the listing, with links to the pages before and after it (the same
    filters, another ``offset``); nothing when the page shows the whole listing."""
    if offset == 0 and shown >= total:
        return ""

    def at(start: int, text: str) -> str:
        query = urlencode({**{k: v for k, v in params.items() if v}, "offset": str(start)})
        return f'<a href="/jobs?{escape(query, quote=True)}">{text}</a>'

    parts = [f"Jobs {offset + 1 if shown else offset}&ndash;{offset + shown} of {total}."]
    if offset > 0:
        parts.append(at(max(0, offset - limit), f"previous {limit}"))
    rest = total - offset - shown
    if rest > 0:
        parts.append(at(offset + shown, f"next {min(limit, rest)}"))
        parts.append(
            f"{rest} more job(s) not shown: page on, narrow the filters, or ask for up to {MAX_ROWS}"
            " rows with <code>limit</code>."
        )
    return f"<p class=pager>{' '.join(parts)}</p>"


def filter_form(params: Mapping[str, str]) -> str:
    """A GET form holding the current values, so a filter is one edit away."""
    inputs = "".join(
        f'<label>{name} <input name="{name}" size=10 value="{escape(params.get(name) or "", quote=True)}">'
        "</label> "
        for name in FIELDS
    )
    current = params.get("sort") or "wasted"
    sorts = "".join(f"<option{' selected' if s == current else ''}>{s}</option>" for s in SORTS)
    running = " checked" if (params.get("running") or "") in ("1", "true", "on") else ""
    return (
        f'<form class=filters method=get action="/jobs">{inputs}'
        f'<label>sort <select name="sort">{sorts}</select></label> '
        f'<label><input type=checkbox name="running" value="1"{running}> running only</label> '
        "<button>filter</button></form>"
    )
