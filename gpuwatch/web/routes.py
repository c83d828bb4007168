"""The web view's routes: ``/`` overview, ``/jobs`` low-utilization list, ``/jobs/{id}`` one job.

Read-only (GET only), server-rendered HTML: the heat map inline SVG, time series as data that
uPlot draws in the browser (:mod:`gpuwatch.web.charts`; ``/static/`` serves it and nothing
else); auth per ``[web]`` (:mod:`gpuwatch.config.web`) as a router dependency, so every page
and asset is behind it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import replace
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import sqlalchemy as sa
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse

from gpuwatch.config import Settings
from gpuwatch.config.web import WebAuth, WebConfig
from gpuwatch.views import (
    GPU_METRICS,
    WINDOW_NAMES,
    GpuSummary,
    JobFilters,
    JobView,
    LowUtilJob,
    VerdictRow,
    cluster_overview,
    evidence_sentences,
    job_view,
    jobs_query,
    low_util_page,
    node_summaries,
    node_view,
)
from gpuwatch.views.gpu_names import gpus_per_node
from gpuwatch.views.report import WEEK, GroupBy, Prices, report_period, usage_report, weekly_history
from gpuwatch.views.summary_text import summary_rows
from gpuwatch.web import charts, svg
from gpuwatch.web.cells import cards as card_count
from gpuwatch.web.cells import pct, table
from gpuwatch.web.groups import group_body, link
from gpuwatch.web.job_filters import BadFilter, filter_form, job_query, pager
from gpuwatch.web.node_list import WINDOW, BadNodeFilter, node_list_body, silent_filter
from gpuwatch.web.node_page import node_body, node_link

CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:10px 20px;display:flex;gap:24px;align-items:baseline}
header a{color:#cfd8dc;text-decoration:none}header b{font-size:18px}
main{padding:12px 20px}h2{font-size:16px;margin:18px 0 6px}
.cards{display:flex;gap:12px}.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 16px}
.card .n{font-size:26px;font-weight:600}.busy .n{color:#1a9850}.idle .n{color:#d73027}
.wasted .n{color:#e66101}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#eceff1}.sim{background:#fff3cd;border:1px solid #e0c060;padding:4px 10px;display:inline-block}
.charts{display:flex;flex-wrap:wrap;gap:10px}.chart{background:#fff;border:1px solid #ddd}
.chart .lbl{font-size:10px;fill:#555}.chart .title{font-size:12px;font-weight:600}
.chart .plot{fill:#fff;stroke:#bbb}.chart .grid{stroke:#eee}.chart .axis{stroke:#999}
figure.chart{margin:0;padding:6px}figure.chart figcaption{font-size:12px;font-weight:600}
figure.chart .nodata{color:#777;font-size:11px;margin:2px 0}
.u-legend{font-size:11px}.u-legend th,.u-legend td{border:0;background:none;padding:0 3px;font-weight:normal}
tr.faulted td{background:#fde0dc}
.cause{font-weight:600}.error{color:#b71c1c;font-weight:600}
form.filters{margin:6px 0 10px}form.filters label{margin-right:6px}
.fix{color:#1b5e20}pre{white-space:pre-wrap;font-size:11px;background:#f4f4f4;padding:6px}
"""


def _page(title: str, body: str, *, simulated: bool = False) -> HTMLResponse:
    banner = (
        '<p class="sim">Simulated data: these GPUs come from the simulated device model.</p>'
        if simulated
        else ""
    )
    return HTMLResponse(
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(title)} — gpuwatch</title>{charts.page_head()}<style>{CSS}</style></head><body>"
        '<header><b>gpuwatch</b><a href="/">overview</a><a href="/jobs">low-utilization jobs</a>'
        '<a href="/nodes">nodes</a></header>'
        f"<main>{banner}{body}</main>{charts.page_scripts()}</body></html>"
    )


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return f"{value:%Y-%m-%d %H:%M} UTC"
    if isinstance(value, float):
        return f"{value:.3g}"
    return escape(str(value))


def _hours(value: float | None) -> str:
    """GPU-hours as the CLI's tables show them, the exact stored value in ``data-value``."""
    if value is None:
        return "<td>-</td>"
    return f'<td data-value="{value!r}">{value:.2f}</td>'


def _job_row(r: LowUtilJob) -> str:
    jid = escape(r.job_id)
    return (
        f'<tr data-job="{jid}"><td><a href="/jobs/{jid}">{jid}</a></td>'
        f"<td>{link(GroupBy.USER, r.user)}</td>"
        f"<td>{_fmt(r.name)}</td><td>{','.join(node_link(n) for n in r.nodes) or '-'}</td>"
        f"<td class=cause>{_fmt(r.cause)}</td>"
        f"<td>{_fmt(WINDOW_NAMES.get(r.window_kind, r.window_kind))}</td>"
        f"<td>{r.confidence:.2f}</td><td>{_fmt(r.gpus)}</td><td>{pct(r.mean_util_ratio)}</td>"
        f"{_hours(r.gpu_hours_wasted)}<td>{_fmt(r.evidence_text)}</td></tr>"
    )


def _jobs_table(rows: list[LowUtilJob]) -> str:
    columns = (
        "job",
        "user",
        "name",
        "node(s)",
        "cause",
        "window",
        "conf",
        "GPUs",
        "util",
        "GPU-h wasted",
        "evidence",
    )
    return table(columns, [_job_row(r) for r in rows], empty="No low-utilization jobs right now.", css="jobs")


# ---------------------------------------------------------------------------- auth


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def make_auth(config: WebConfig):  # type: ignore[no-untyped-def]
    """The router dependency enforcing ``config.auth``; returns the user (or None)."""

    def check(request: Request) -> str | None:
        if config.auth is WebAuth.NONE:
            return None
        if config.auth is WebAuth.HEADER:
            user = request.headers.get(config.user_header, "").strip()
            if not user:
                raise HTTPException(401, f"not authenticated: no {config.user_header} header from the proxy")
            if "*" not in config.allowed_users and user not in config.allowed_users:
                raise HTTPException(403, f"user {user!r} is not in web.allowed_users")
            return user
        token = config.resolve_token()
        if token is None:
            raise HTTPException(503, "web.token_file cannot be read")
        expected = _digest(token)
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer ") and hmac.compare_digest(_digest(auth[7:].strip()), expected):
            return "token"
        cookie = request.cookies.get(config.cookie_name)
        if cookie and hmac.compare_digest(cookie, expected):
            return "token"
        given = request.query_params.get("token")
        if given is not None and hmac.compare_digest(_digest(given), expected):
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            location = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            cookie_attrs = f"{config.cookie_name}={expected}; Path=/; HttpOnly; SameSite=Strict"
            if config.cookie_secure:
                cookie_attrs += "; Secure"
            raise HTTPException(
                303, "authenticated", headers={"Location": location, "Set-Cookie": cookie_attrs}
            )
        raise HTTPException(
            401,
            "token required: Authorization: Bearer <token> or ?token=<token>",
            headers={"WWW-Authenticate": "Bearer"},
        )

    return check


# ---------------------------------------------------------------------------- pages

_MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def build_web_router(settings: Settings, engine: sa.Engine) -> APIRouter:
    """The web view for the daemon app (``app.include_router(build_web_router(settings, engine))``)."""
    config = settings.web
    if not config.enabled:
        return APIRouter()
    low_ratio = settings.classify.util_low_ratio
    router = APIRouter(dependencies=[Depends(make_auth(config))], tags=["web"], include_in_schema=False)

    def now() -> datetime:
        return datetime.now(timezone.utc)

    @router.get("/static/{name}")
    def static_asset(name: str) -> FileResponse:
        """The chart library and its driver (``gpuwatch/web/static``); nothing else is served."""
        if name not in charts.ASSETS:
            raise HTTPException(404, f"no such file: {name}")
        return FileResponse(
            charts.STATIC_DIR / name,
            media_type=_MEDIA_TYPES[Path(name).suffix],
            headers={"Cache-Control": "public, max-age=86400"},
        )

    @router.get("/", response_class=HTMLResponse)
    def overview_page() -> HTMLResponse:
        ov = cluster_overview(engine, now(), low_ratio=low_ratio)
        cards = "".join(
            f'<div class="card {cls}"><div class=n>{card_count(n)}</div>{label}</div>'
            for cls, n, label in (
                ("", ov.gpus_reporting, "GPUs reporting (last 10 min)"),
                ("busy", ov.gpus_busy, f"busy (util &gt; {100 * low_ratio:.0f}%)"),
                ("idle", ov.gpus_idle, "idle or nearly"),
                ("wasted", ov.gpus_wasted, "in jobs flagged wasteful"),
            )
        )
        heat = (
            svg.heatmap(
                ov.rows,
                ov.start,
                ov.minutes,
                ov.cells,
                title="GPU utilization per node and minute, last hour",
                links=[f"/nodes/{quote(name, safe='')}" for name in ov.rows],
            )
            if ov.rows
            else "<p>No GPU data in the last hour.</p>"
        )
        body = (
            f"<h2>Cluster now ({ov.now:%Y-%m-%d %H:%M} UTC)</h2><div class=cards>{cards}</div>"
            f"{_faults_table(ov.faults)}"
            "<h2>GPU utilization per node (the mean of its GPUs), last hour</h2>"
            f"<p>A node's page shows each of its GPUs.</p>{heat}"
            f"<h2>Low-utilization jobs</h2>{_jobs_table(ov.jobs)}"
        )
        return _page("overview", body, simulated=ov.simulated)

    @router.get("/jobs", response_class=HTMLResponse)
    def jobs_page(request: Request) -> HTMLResponse:
        params = dict(request.query_params)
        head = f"<h2>Low-utilization jobs (latest verdicts)</h2>{filter_form(params)}"
        at = now()
        try:
            query = job_query(params, at)
        except BadFilter as exc:
            page = _page("low-utilization jobs", f"{head}<p class=error>{escape(str(exc))}</p>")
            page.status_code = 400
            return page
        found = low_util_page(engine, replace(query.filters, limit=query.limit), now=at, offset=query.offset)
        shown = found.jobs
        nav = pager(params, query.offset, query.limit, len(shown), found.total)
        return _page("low-utilization jobs", f"{head}{_jobs_table(shown)}{nav}")

    @router.get("/jobs/{job_id}", response_class=HTMLResponse)
    def job_page(job_id: str) -> HTMLResponse:
        view = job_view(engine, job_id, now(), charts=True, thresholds=settings.classify)
        if view is None:  # a page, not the API's JSON: people follow links from notices
            page = _page(
                "job not found",
                f"<h2>No job {escape(job_id)}</h2><p>gpuwatch has no record of this job: neither Slurm "
                "(the daemon's sync) nor an agent named it. Check the id, or see the "
                '<a href="/jobs">low-utilization jobs</a>.</p>',
            )
            page.status_code = 404
            return page
        return _page(f"job {job_id}", _job_body(view), simulated=view.simulated)

    def group_page(by: GroupBy, name: str) -> HTMLResponse:
        start, end = report_period(WEEK, now())
        report = settings.report
        prices = Prices(gpu_hour=report.gpu_hour_price, billing_hour=report.billing_hour_price)
        rows = usage_report(engine, by, start, end, report.grid_co2_kg_per_kwh, prices, group=name)
        row = next((r for r in rows if r.group == name), None)
        weeks = weekly_history(engine, by, name, end)
        who = {"user": name} if by is GroupBy.USER else {"account": name}
        jobs = jobs_query(engine, JobFilters(since=start, limit=200, **who), now=end)
        if row is None and not jobs and not any(w.gpu_hours for w in weeks):
            page = _page(
                f"no {by.value} {name}",
                f"<h2>No {by.value} {escape(name)}</h2><p>No GPU job of this {by.value} in the last 8 weeks. "
                'See the <a href="/jobs">low-utilization jobs</a>.</p>',
            )
            page.status_code = 404
            return page
        return _page(f"{by.value} {name}", group_body(by, name, row, weeks, jobs, end))

    @router.get("/nodes", response_class=HTMLResponse)
    def nodes_page(request: Request) -> HTMLResponse:
        params = request.query_params
        faulty = params.get("faulty") in ("1", "true", "yes")
        try:
            silent = silent_filter(params.get("silent"))
        except BadNodeFilter as exc:
            page = _page("nodes", f"<h2>Nodes</h2><p class=error>{escape(str(exc))}</p>")
            page.status_code = 400
            return page
        at = now()
        rows = node_summaries(engine, WINDOW, now=at, faulty=faulty, silent=silent)
        return _page("nodes", node_list_body(rows, at, faulty=faulty, silent=silent))

    @router.get("/nodes/{name}", response_class=HTMLResponse)
    def node_page(name: str) -> HTMLResponse:
        view = node_view(engine, name, now())
        if view is None:
            page = _page(
                f"no node {name}",
                f"<h2>No node {escape(name)}</h2><p>No agent has reported from a node of this name. "
                'See the <a href="/">overview</a>.</p>',
            )
            page.status_code = 404
            return page
        return _page(f"node {name}", node_body(view), simulated=view.simulated)

    @router.get("/users/{name}", response_class=HTMLResponse)
    def user_page(name: str) -> HTMLResponse:
        return group_page(GroupBy.USER, name)

    @router.get("/accounts/{name}", response_class=HTMLResponse)
    def account_page(name: str) -> HTMLResponse:
        return group_page(GroupBy.ACCOUNT, name)

    return router


_METRIC_TITLES = {
    "util": "GPU utilization",
    "sm": "SM active",
    "tensor": "tensor pipe active",
    "memory": "GPU memory used (of total)",
    "power": "power (of limit)",
}


def _job_body(view: JobView) -> str:
    job = view.job
    facts = [
        ("job", job.job_id),
        ("name", job.name),
        ("user", job.user),
        ("account", job.account),
        ("state", job.state),
        ("start", job.start_at),
        ("end", job.end_at),
        ("GPUs", None),
        ("CPUs", job.cpus),
    ]
    parts = [f"<h2>Job {escape(job.job_id)}</h2><table><tr>"]
    parts += [f"<th>{k}</th>" for k, _ in facts] + ["</tr><tr>"]
    linked = {
        "user": link(GroupBy.USER, job.user),
        "account": link(GroupBy.ACCOUNT, job.account),
        "GPUs": f"{len(view.gpu_refs)}: {_gpu_list(view.gpu_refs)}",
    }
    parts += [f"<td>{linked.get(k) or _fmt(v)}</td>" for k, v in facts] + ["</tr></table>"]
    summary = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in summary_rows(view))
    parts.append(f"<h2>Summary</h2><table class=summary>{summary}</table>")
    parts.append("<h2>Per GPU, over the whole run</h2>" + _gpu_table(view))
    series_of = view.charts
    one_node = len({ref.node for ref in view.gpu_refs}) == 1
    if series_of is not None:
        parts.append("<h2>Per-GPU timelines (per-minute means)</h2><div class=charts>")
        for metric in GPU_METRICS:
            series = sorted(
                (_short(ref.label, one_node), pts) for ref, pts in series_of.gpu.get(metric, {}).items()
            )
            parts.append(
                charts.line_chart(
                    _METRIC_TITLES[metric],
                    [charts.Series(label, pts) for label, pts in series],
                    series_of.start,
                    series_of.end,
                    y_max=1.0,
                    width=405,
                )
            )
        span = (series_of.start, series_of.end)
        cpu = [charts.Series(k, v) for k, v in series_of.cpu.items()]
        parts.append(charts.line_chart("CPU", cpu, *span, y_max=1.0, width=405))
        net = [charts.Series(k, v) for k, v in series_of.network.items()]
        parts.append(charts.line_chart("network (bytes/s)", net, *span, unit="bytes_per_s", width=405))
        parts.append("</div>")
    parts.append("<h2>Verdicts</h2>")
    parts.append(_verdicts(_one_per_window(view.evaluation.verdicts if view.evaluation else ())))
    return "".join(parts)


def _short(label: str, one_node: bool) -> str:
    """``gpu3`` for ``node07/gpu3`` when the job has one node: the legend fits its chart."""
    return label.rsplit("/", 1)[-1] if one_node else label


def _gpu_row(g: GpuSummary) -> str:
    memory = None if g.memory_used_bytes_max is None else g.memory_used_bytes_max / 2**30
    fault = g.fault
    return (
        f"<tr{' class=faulted' if fault else ''}><td>{_fmt(g.node)}</td><td>{g.gpu_index}</td>"
        f"<td>{pct(g.util_gpu_mean)}</td><td>{pct(g.sm_active_mean)}</td><td>{pct(g.tensor_active_mean)}</td>"
        f"<td>{_fmt(memory)}</td><td>{_fmt(g.power_watts_mean)}</td><td>{escape(fault or '-')}</td></tr>"
    )


def _gpu_table(view: JobView) -> str:
    """The job's GPUs; a faulted or lost one in the node page's colour, with what happened."""
    columns = ("node", "GPU", "util", "SM active", "tensor", "memory max (GiB)", "power mean (W)", "fault")
    return table(columns, [_gpu_row(g) for g in view.gpus], empty="No GPUs known.")


def _faults_table(faults: dict[str, Any]) -> str:
    """The GPUs that faulted in the overview's hour, a row each in the node page's colour and
    words (``gpuwatch nodes --faulty`` lists the same); nothing when none did."""
    if not faults:
        return ""
    rows = [
        f"<tr class=faulted><td>{node_link(node)}</td><td>gpu{f.gpu_index}</td>"
        f"<td>{escape(f.fault or '-')}</td></tr>"
        for node, found in faults.items()
        for f in found
    ]
    return "<h2>GPU faults, last hour</h2>" + table(("node", "GPU", "fault"), rows, empty="")


def _gpu_list(gpus: Any) -> str:
    """``node07 gpu0-3; node08 gpu0`` with each node linked to its page (HTML)."""
    return gpus_per_node(((g.node, g.gpu_index) for g in gpus), node_link)


def _one_per_window(rows: tuple[VerdictRow, ...]) -> tuple[VerdictRow, ...]:
    """Each window's verdicts, less a recent-window verdict whose cause the whole-job window
    already shows (the same text twice says nothing new)."""
    whole = {v.cause for v in rows if v.window_kind == "job"}
    return tuple(v for v in rows if v.window_kind == "job" or v.cause not in whole)


def _verdicts(rows: tuple[VerdictRow, ...]) -> str:
    if not rows:
        return (
            "<p>Not evaluated yet (the classifier waits for the grace period and whole minutes of data).</p>"
        )
    out = []
    for v in rows:
        evidence = dict(v.evidence or {})
        evidence.pop("values", None)
        sentences = "".join(f"<li>{escape(s)}</li>" for s in evidence_sentences(evidence))
        out.append(
            f"<div class=verdict><p><span class=cause>{escape(v.cause)}</span> "
            f"({escape(WINDOW_NAMES.get(v.window_kind, v.window_kind))}, "
            f"{v.window_start:%H:%M}-{v.window_end:%H:%M} UTC, "
            f"confidence {v.confidence:.2f}, GPU-h wasted {v.gpu_hours_wasted or 0:.2f}): "
            f"{escape(v.summary)}</p>"
            + (f"<p class=fix>Fix: {escape(v.fix)}</p>" if v.fix else "")
            + (f"<ul class=evidence>{sentences}</ul>" if sentences else "")
            + "<details><summary>raw evidence</summary>"
            + f"<pre>{escape(json.dumps(evidence, indent=1, default=str))}</pre>"
            "</details></div>"
        )
    return "".join(out)
