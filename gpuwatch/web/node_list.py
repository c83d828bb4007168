"""The page of every node: when each was last heard from and which of its GPUs faulted, the
list ``gpuwatch nodes`` prints (:func:`gpuwatch.views.node_summaries`), with its filters:
``?faulty=1`` the nodes with a GPU fault in the last hour, ``?silent=MIN`` the nodes not heard
from in ``MIN`` minutes (or never)."""

from __future__ import annotations

from datetime import datetime, timedelta
from html import escape

from gpuwatch.clock import MAX_SPAN
from gpuwatch.views.nodes import NodeSummary
from gpuwatch.web.cells import table, when
from gpuwatch.web.node_page import node_link

#: the span the page counts samples and faults over (``gpuwatch nodes``' default ``--window``)
WINDOW = timedelta(hours=1)
#: a node not heard from this long is marked silent (agents push every 3 minutes by default)
SILENT = timedelta(minutes=10)


class BadNodeFilter(ValueError):
    """A filter the page cannot read; its message is the one line the page shows."""


def silent_filter(text: str | None) -> timedelta | None:
    """``?silent=MIN`` as a span; None when not given. Raises :class:`BadNodeFilter`."""
    if text is None or text == "":
        return None
    if not text.isdigit() or not 1 <= int(text) <= MAX_SPAN.total_seconds() // 60:
        raise BadNodeFilter(f"silent={text!r}: give whole minutes, from 1 to 100 years")
    return timedelta(minutes=int(text))


def node_list_body(rows: list[NodeSummary], now: datetime, *, faulty: bool, silent: timedelta | None) -> str:
    """The table of ``rows`` (already filtered), a faulted node's row in the node page's colour."""
    cells = [_row(n, now) for n in rows]
    links = (
        '<p>Show: <a href="/nodes">all</a> · <a href="/nodes?faulty=1">with a GPU fault</a> · '
        '<a href="/nodes?silent=10">silent 10 min</a></p>'
    )
    said = ("with a GPU fault in the last hour" if faulty else "") + (
        f"{' and ' if faulty else ''}not heard from in {int(silent.total_seconds() // 60)} min"
        if silent
        else ""
    )
    head = f"<h2>Nodes{' ' + escape(said) if said else ''}</h2>{links}"
    columns = ("node", "last seen", "agent", "GPUs", "MIG instances", "samples (1 h)", "GPU faults (1 h)")
    empty = "No node matches." if faulty or silent else "No node has registered yet."
    return head + table(columns, cells, empty=empty)


def _row(n: NodeSummary, now: datetime) -> str:
    seen = when(n.last_seen_at)
    if n.silent_since(now, SILENT):
        seen += " <b>(silent)</b>"
    return (
        f"<tr{' class=faulted' if n.faults else ''}><td>{node_link(n.name)}</td><td>{seen}</td>"
        f"<td>{escape(n.agent_version or '-')}</td><td>{n.gpus}</td><td>{n.mig_instances}</td>"
        f"<td>{n.samples_window}</td><td>{escape(n.faults_text) or '-'}</td></tr>"
    )
