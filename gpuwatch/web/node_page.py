"""The page of one node: its GPUs over the last hours (faults marked), a utilization chart per
GPU, and the jobs that held them with the cause every surface names.

The figures are :func:`gpuwatch.views.node_view`'s; the overview's heat map (one row per node)
and every job table link here.
"""

from __future__ import annotations

from fractions import Fraction
from html import escape
from urllib.parse import quote

from gpuwatch.views import GroupBy, NodeView
from gpuwatch.views.node import NodeGpu, NodeJob
from gpuwatch.web import charts
from gpuwatch.web.cells import gib, pct, table, when
from gpuwatch.web.groups import link


def node_link(name: str | None) -> str:
    """A node as a link to its page; '-' for none."""
    if not name:
        return "-"
    return f'<a href="/nodes/{quote(name, safe="")}">{escape(name)}</a>'


def _gpu_row(g: NodeGpu) -> str:
    fault = g.fault
    if g.parent_index is not None:  # a MIG instance, after its card
        share = (
            ""
            if g.card_fraction is None
            else f" ({Fraction(g.card_fraction).limit_denominator(8)} of gpu{g.parent_index})"
        )
        label = f"&nbsp;&nbsp;MIG gpu{g.index}{share}"
    else:
        label = f"gpu{g.index}"
    util = "in its MIG instances" if g.split else pct(g.util_mean)
    return (
        f"<tr{' class=faulted' if fault else ''}><td>{label}</td><td>{escape(g.model or '-')}</td>"
        f"<td>{g.minutes}</td><td>{util}</td><td>{pct(g.sm_active_mean)}</td>"
        f"<td>{gib(g.memory_used_max_bytes)}</td><td>{gib(g.memory_total_bytes)}</td>"
        f"<td>{'-' if g.power_mean_watts is None else f'{g.power_mean_watts:.0f}'}</td>"
        f"<td>{escape(fault or '-')}</td></tr>"
    )


def _job_row(j: NodeJob) -> str:
    jid = escape(j.job_id)
    wasted = "-" if j.gpu_hours_wasted is None else f"{j.gpu_hours_wasted:.2f}"
    return (
        f'<tr data-job="{jid}"><td><a href="/jobs/{jid}">{jid}</a></td>'
        f"<td>{link(GroupBy.USER, j.user)}</td><td>{link(GroupBy.ACCOUNT, j.account)}</td>"
        f"<td>{escape(j.state or '-')}</td><td>{when(j.start_at)}</td><td>{when(j.end_at)}</td>"
        f"<td>{','.join(f'gpu{i}' for i in j.gpu_indices)}</td>"
        f"<td class=cause>{escape(j.cause or '-')}</td><td>{wasted}</td></tr>"
    )


def _gpus(view: NodeView) -> str:
    columns = (
        "GPU",
        "model",
        "minutes",
        "util",
        "SM active",
        "memory max (GiB)",
        "memory (GiB)",
        "power mean (W)",
    )
    rows = [_gpu_row(g) for g in view.gpus]
    return table((*columns, "faults"), rows, empty="No GPU data in this span.", css="gpus")


def _jobs(view: NodeView) -> str:
    columns = ("job", "user", "account", "state", "start", "end", "GPUs here", "cause", "GPU-h wasted")
    rows = [_job_row(j) for j in view.jobs]
    return table(columns, rows, empty="No Slurm job held this node's GPUs in this span.", css="jobs")


def node_body(view: NodeView) -> str:
    hours = round((view.end - view.start).total_seconds() / 3600)
    series = [charts.Series(f"gpu{index}", points) for index, points in sorted(view.util.items())]
    faulted = sum(1 for g in view.gpus if g.fault)
    mig = f" ({view.mig_instances} MIG instances)" if view.mig_instances else ""
    return (
        f"<h2>Node {escape(view.name)}</h2><table><tr><th>last seen</th><th>agent</th><th>GPUs</th>"
        f"<th>faulted</th></tr><tr><td>{when(view.last_seen_at)}</td>"
        f"<td>{escape(view.agent_version or '-')}</td><td>{view.cards}{mig}</td><td>{faulted}</td>"
        "</tr></table>"
        f"<h2>GPUs, last {hours} h</h2>{_gpus(view)}"
        "<div class=charts>"
        + charts.line_chart(
            f"GPU utilization, last {hours} h (per-minute means)",
            series,
            view.start,
            view.end,
            y_max=1.0,
            width=820,
            height=240,
        )
        + f"</div><h2>Jobs on this node, last {hours} h</h2>{_jobs(view)}"
    )
