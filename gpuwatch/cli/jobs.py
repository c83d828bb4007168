"""``gpuwatch jobs``: running and recent Slurm jobs, their GPUs and how busy those were.

Rows come from :func:`gpuwatch.sql.jobs.jobs_query` (the daemon's Slurm sync fills
``slurm_jobs``/``job_gpus``; utilization is the mean of the job's GPU samples over its run
time). Adding an option: decorate :func:`jobs` with it, map it onto a
:class:`~gpuwatch.sql.jobs.JobFilters` field in :func:`filters_from_options` (or filter the
rows in :func:`job_rows`) and, if it shows something new, add a column to :data:`COLUMNS`.

``--low-util`` switches to the classifier's view: jobs whose latest verdict is not healthy,
from :func:`gpuwatch.sql.lowutil.low_util_jobs` (reads ``verdicts`` joined to
``slurm_jobs``), with the columns of :data:`LOW_UTIL_COLUMNS` — the documented, stable
JSON of ``docs/cli.md``.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from gpuwatch.classify.verdict import Cause
from gpuwatch.cli.render import OutputFormat, render
from gpuwatch.clock import utcnow
from gpuwatch.sql.jobs import JobFilters, JobSummary, jobs_query
from gpuwatch.sql.lowutil import SORTS, LowUtilFilters, low_util_jobs

if TYPE_CHECKING:  # gpuwatch.cli.main imports this module from its last lines: no import back
    from gpuwatch.cli.main import Context

#: (key, header); JSON/CSV use the keys, so they are the stable names
COLUMNS: list[tuple[str, str]] = [
    ("job_id", "job"),
    ("name", "name"),
    ("user", "user"),
    ("account", "account"),
    ("partition", "partition"),
    ("state", "state"),
    ("start_at", "start (UTC)"),
    ("end_at", "end (UTC)"),
    ("elapsed_s", "elapsed s"),
    ("gpus", "GPUs"),
    ("gpu_list", "on"),
    ("util_gpu_mean", "GPU util"),
    ("util_samples", "samples"),
]

#: ``--low-util`` columns: (key, header). The JSON keys and their meaning are pinned by
#: docs/cli.md and tests/cli_lowutil/test_lowutil.py: add keys at the end, never rename
LOW_UTIL_COLUMNS: list[tuple[str, str]] = [
    ("job_id", "job"),
    ("user", "user"),
    ("account", "account"),
    ("partition", "partition"),
    ("state", "state"),
    ("gpus", "GPUs"),
    ("start_at", "start (UTC)"),
    ("end_at", "end (UTC)"),
    ("duration_s", "duration"),
    ("gpu_hours", "GPU-h"),
    ("gpu_hours_wasted", "GPU-h wasted"),
    ("mean_util_ratio", "util"),
    ("cause", "cause"),
    ("confidence", "conf"),
    ("window_kind", "window"),
    ("evaluated_at", "evaluated (UTC)"),
    ("summary", "evidence"),
]
#: what the table shows of them (people need less than tools)
_LOW_UTIL_TABLE = ("job_id", "user", "account", "gpus", "duration_s", "gpu_hours_wasted",
                   "mean_util_ratio", "cause", "summary")  # fmt: skip

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)


def parse_since(text: str) -> timedelta:
    """``90s``, ``30m``, ``2h``, ``7d``, ``1w`` -> a timedelta (click error otherwise)."""
    m = _SINCE.match(text)
    if not m:
        raise click.BadParameter(f"{text!r}: use a number and a unit s/m/h/d/w, e.g. 2h or 7d")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2).lower()])


def filters_from_options(options: dict[str, Any], now: datetime) -> JobFilters:
    """The command's options as the query's filters."""
    states = tuple(s.strip().upper() for s in (options.get("state") or "").split(",") if s.strip())
    return JobFilters(
        user=options.get("user"),
        account=options.get("account"),
        partition=options.get("partition"),
        node=options.get("node"),
        states=states,
        since=now - parse_since(options["since"]) if options.get("since") else None,
        limit=options.get("limit"),
    )


def row_of(job: JobSummary) -> dict[str, Any]:
    """One output row: ``job_id`` is what users type (``18_1`` for array tasks)."""
    return {
        "job_id": job.display_id,
        "name": job.name,
        "user": job.user,
        "account": job.account,
        "partition": job.partition,
        "state": job.state,
        "start_at": job.start_at,
        "end_at": job.end_at,
        "elapsed_s": job.elapsed_s,
        "gpus": job.gpus,
        "gpu_list": ",".join(job.gpu_list) or None,
        "util_gpu_mean": None if job.util_gpu_mean is None else round(job.util_gpu_mean, 4),
        "util_samples": job.util_samples,
    }


def low_util_filters(options: dict[str, Any], now: datetime) -> LowUtilFilters:
    base = filters_from_options(options, now)
    return LowUtilFilters(
        user=base.user,
        account=base.account,
        partition=base.partition,
        node=base.node,
        states=base.states,
        since=base.since,
        cause=options.get("cause"),
        sort=options.get("sort") or "wasted",
        limit=base.limit,
    )


def _duration(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    h, rest = divmod(int(seconds), 3600)
    return f"{h}h{rest // 60:02d}m" if h else f"{rest // 60}m{rest % 60:02d}s"


def low_util_table_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows formatted for people (durations, percentages); JSON/CSV get the raw values."""
    out = []
    for r in rows:
        util = r["mean_util_ratio"]
        out.append(
            {
                **r,
                "duration_s": _duration(r["duration_s"]),
                "gpu_hours_wasted": None if r["gpu_hours_wasted"] is None else f"{r['gpu_hours_wasted']:.2f}",
                "mean_util_ratio": None if util is None else f"{100 * util:.0f}%",
            }
        )
    return out


def render_low_util(rows: list[dict[str, Any]], fmt: OutputFormat, title: str) -> str:
    if fmt is OutputFormat.TABLE:
        columns = [c for c in LOW_UTIL_COLUMNS if c[0] in _LOW_UTIL_TABLE]
        return render(low_util_table_rows(rows), columns, fmt, title=title)
    return render(rows, LOW_UTIL_COLUMNS, fmt)


def job_rows(engine: Any, filters: JobFilters, now: datetime) -> list[dict[str, Any]]:
    return [row_of(job) for job in jobs_query(engine, filters, now=now)]


@click.command("jobs")
@click.option(
    "--format",
    "fmt",
    type=click.Choice([f.value for f in OutputFormat]),
    default=OutputFormat.TABLE.value,
    show_default=True,
    help="Output as a table for people, or JSON/CSV for tools.",
)
@click.option("--user", help="Only this user's jobs.")
@click.option("--account", help="Only jobs of this Slurm account.")
@click.option("--partition", help="Only jobs in this partition.")
@click.option("--node", help="Only jobs that ran on this node.")
@click.option("--state", help="Only these states, comma-separated (RUNNING,PENDING or R,PD).")
@click.option(
    "--since",
    default="1d",
    show_default=True,
    help="Jobs running at some point in this window: 90s, 30m, 2h, 7d, 1w.",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most N jobs (newest first).")
@click.option(
    "--low-util",
    is_flag=True,
    help="Only jobs whose latest verdict is not healthy: cause, GPU-hours wasted, evidence.",
)
@click.option(
    "--cause",
    type=click.Choice([c.value for c in Cause if c is not Cause.HEALTHY]),
    help="With --low-util: only jobs whose latest evaluation found this cause.",
)
@click.option(
    "--sort",
    type=click.Choice(SORTS),
    default="wasted",
    show_default=True,
    help="With --low-util: most GPU-hours wasted, lowest util, longest, or newest start first.",
)
@click.pass_obj
def jobs(ctx: Context, fmt: str, **options: Any) -> None:
    """Running and recent Slurm jobs: their GPUs (node:index) and mean GPU utilization.

    With --low-util: the jobs the classifier found wasting GPUs, and why.
    """
    from gpuwatch.sql import migrate

    parse_since(options["since"])  # a bad value fails before the database is opened
    engine = ctx.engine()
    if not migrate.is_up_to_date(engine):
        raise click.ClickException("database schema is not current; run: gpuwatch db upgrade")
    now = utcnow()
    if options.get("low_util") or options.get("cause"):
        found = low_util_jobs(engine, low_util_filters(options, now), now=now)
        title = f"Jobs with low GPU use (since {options['since']}, by {options['sort']})"
        click.echo(render_low_util(found, OutputFormat(fmt), title))
        return
    rows = job_rows(engine, filters_from_options(options, now), now)
    click.echo(render(rows, COLUMNS, OutputFormat(fmt), title=f"Slurm jobs (since {options['since']})"))


def register(cli: click.Group) -> None:
    cli.add_command(jobs)
