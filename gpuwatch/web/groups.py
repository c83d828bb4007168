"""The page of one user or account: its week in figures, its weekly trend, its recent jobs.

The figures are the user's or account's row of ``gpuwatch report`` (:func:`gpuwatch.views.usage_report`
over the last 7 days), the trend is :func:`gpuwatch.views.report.weekly_history`, the jobs are
:func:`gpuwatch.views.jobs_query`'s: the same numbers as the CLI's.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from urllib.parse import quote

from gpuwatch.views import GroupBy, JobSummary, ReportRow
from gpuwatch.views.report import WeekRow
from gpuwatch.web import charts
from gpuwatch.web.cells import num, pct, table

#: the URL path of each kind of group page
PATHS = {GroupBy.USER: "users", GroupBy.ACCOUNT: "accounts"}


def link(by: GroupBy, name: str | None) -> str:
    """A user or account as a link to its page; '-' for none."""
    if not name:
        return "-"
    return f'<a href="/{PATHS[by]}/{quote(name, safe="")}">{escape(name)}</a>'


def _figures(row: ReportRow | None) -> str:
    if row is None:
        return "<p>No GPU job of this group ran in the last 7 days.</p>"
    trend = "-"
    if row.wasted_share_week_before is not None and row.wasted_share_last_week is not None:
        trend = f"{pct(row.wasted_share_week_before)} &gt; {pct(row.wasted_share_last_week)}"
    cells = [
        ("jobs", str(row.jobs)),
        ("flagged", str(row.jobs_flagged)),
        ("GPU-h", num(row.gpu_hours)),
        ("wasted GPU-h", f'<span data-value="{row.gpu_hours_wasted!r}">{num(row.gpu_hours_wasted)}</span>'),
        ("wasted", pct(row.wasted_share)),
        ("wasted, week before &gt; last", trend),
        ("top cause", escape(row.top_cause or "-")),
        ("GPU eff", pct(row.gpu_efficiency)),
        ("CPU eff", pct(row.cpu_efficiency)),
        ("mem eff", pct(row.memory_efficiency)),
        ("kWh", num(row.energy_kwh, 2)),
        ("jobs to request less/more", escape(", ".join(f"{what} {n}" for what, n in row.advised()) or "-")),
        ("fixes return GPU-h", "-" if row.saving_gpu_hours is None else num(row.saving_gpu_hours)),
    ]
    head = "".join(f"<th>{k}</th>" for k, _ in cells)
    body = "".join(f"<td>{v}</td>" for _, v in cells)
    return f"<table class=report><tr>{head}</tr><tr>{body}</tr></table>"


def _trend(weeks: list[WeekRow]) -> str:
    if not weeks:
        return ""
    start, end = weeks[0].start, weeks[-1].end
    share = [charts.Series("wasted share", [(w.end, w.wasted_share) for w in weeks])]
    hours = [
        charts.Series("GPU-hours held", [(w.end, w.gpu_hours) for w in weeks]),
        charts.Series("wasted", [(w.end, w.gpu_hours_wasted) for w in weeks]),
    ]
    return (
        "<div class=charts>"
        + charts.line_chart("wasted share, week by week", share, start, end, y_max=1.0, width=405)
        + charts.line_chart("GPU-hours, week by week", hours, start, end, unit="count", width=405)
        + "</div>"
    )


def _job_row(r: JobSummary, other: GroupBy) -> str:
    jid = escape(r.display_id)
    start = "-" if r.start_at is None else f"{r.start_at:%Y-%m-%d %H:%M}"
    whose = r.account if other is GroupBy.ACCOUNT else r.user
    href = quote(r.display_id, safe="")
    return (
        f'<tr><td><a href="/jobs/{href}">{jid}</a></td><td>{escape(r.name or "-")}</td>'
        f"<td>{link(other, whose)}</td><td>{escape(r.state or '-')}</td><td>{start}</td>"
        f"<td>{r.gpus if r.gpus is not None else '-'}</td><td>{pct(r.mean_util_ratio)}</td></tr>"
    )


def _jobs(rows: list[JobSummary], by: GroupBy) -> str:
    other = GroupBy.ACCOUNT if by is GroupBy.USER else GroupBy.USER
    columns = ("job", "name", other.value, "state", "start", "GPUs", "mean util")
    return table(columns, [_job_row(r, other) for r in rows], empty="No jobs in the last 7 days.", css="jobs")


def group_body(
    by: GroupBy, name: str, row: ReportRow | None, weeks: list[WeekRow], jobs: list[JobSummary], now: datetime
) -> str:
    """The page's body: the last 7 days' figures, 8 weeks of trend, the jobs of the last 7 days."""
    return (
        f"<h2>{escape(by.value.capitalize())} {escape(name)}</h2>"
        f"<h3>Last 7 days (to {now:%Y-%m-%d %H:%M} UTC)</h3>{_figures(row)}"
        f"<h3>Week by week</h3>{_trend(weeks)}"
        f"<h3>Jobs</h3>{_jobs(jobs, by)}"
    )
