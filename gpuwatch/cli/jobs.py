"""``gpuwatch jobs``: running and recent Slurm jobs, their GPUs and how busy those were.

Rows come from :func:`gpuwatch.views.jobs_query`; ``--low-util`` switches to the jobs that
waste GPUs, from :func:`gpuwatch.views.low_util_jobs` (the listing the web view, the demo and
the alert rules show too). Both listings share one vocabulary (:data:`HEADERS`): the same
key and header for the same thing, ratios and seconds in JSON/CSV, percent and ``1h02m`` in
tables (:func:`for_people`). The JSON keys are the stable contract of ``docs/cli.md``.

Adding an option: decorate :func:`jobs` with it, map it onto a
:class:`~gpuwatch.views.JobFilters` field in :func:`filters_from_options` and, if it shows
something new, add its key to :data:`HEADERS` and :data:`JOB_KEYS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from gpuwatch.classify.verdict import Cause
from gpuwatch.cli.params import LIMIT
from gpuwatch.cli.render import FORMAT_OPTION, Column, OutputFormat, json_array, percent, render
from gpuwatch.clock import parse_span, utcnow
from gpuwatch.slurm.model import states_in
from gpuwatch.views import (
    SORTS,
    WINDOW_NAMES,
    JobFilters,
    JobSummary,
    LowUtilFilters,
    LowUtilJob,
    jobs_query,
    low_util_json,
    low_util_page,
)

if TYPE_CHECKING:  # gpuwatch.cli.main imports this module from its last lines: no import back
    from gpuwatch.cli.main import Context

#: key -> table header, for every column of both listings
HEADERS: dict[str, str] = {
    "job_id": "job",
    "name": "name",
    "user": "user",
    "account": "account",
    "partition": "partition",
    "state": "state",
    "start_at": "start (UTC)",
    "end_at": "end (UTC)",
    "duration_s": "duration",
    "gpus": "GPUs",
    "gpu_list": "on",
    "mean_util_ratio": "util",
    "util_samples": "samples",
    "gpu_hours": "GPU-h",
    "gpu_hours_wasted": "GPU-h wasted",
    "cause": "cause",
    "confidence": "conf",
    "window_kind": "window",
    "evaluated_at": "evaluated (UTC)",
    "summary": "evidence",
}

#: ``gpuwatch jobs`` keys, in output order
JOB_KEYS = ("job_id", "name", "user", "account", "partition", "state", "start_at", "end_at", "duration_s",
            "gpus", "gpu_list", "mean_util_ratio", "util_samples")  # fmt: skip
#: ``--low-util`` keys, pinned by docs/cli.md and tests/cli_lowutil/test_lowutil.py: add keys at
#: the end, never rename
LOW_UTIL_KEYS = ("job_id", "user", "account", "partition", "state", "gpus", "start_at", "end_at",
                 "duration_s", "gpu_hours", "gpu_hours_wasted", "mean_util_ratio", "cause", "confidence",
                 "window_kind", "evaluated_at", "summary")  # fmt: skip
#: what the ``--low-util`` table shows of them (people need less than tools)
LOW_UTIL_TABLE_KEYS = ("job_id", "user", "account", "gpus", "duration_s", "gpu_hours_wasted",
                       "mean_util_ratio", "cause", "window_kind", "summary")  # fmt: skip
#: what a narrow terminal's ``--low-util`` table leaves out first (``gpuwatch job ID`` has the
#: evidence); only the evidence wraps, at least 30 wide (one word a line is no reading)
LOW_UTIL_DROP_FIRST = ("summary", "window_kind", "account", "duration_s", "user")
LOW_UTIL_WRAP = ("summary",)
LOW_UTIL_MIN_WIDTHS = {"summary": 30}
#: the same for ``gpuwatch jobs``: the job's name and times go before its GPUs and use
JOBS_DROP_FIRST = ("end_at", "start_at", "name", "util_samples", "partition", "account", "gpu_list")
JOBS_WRAP = ("name", "start_at", "end_at", "gpu_list")


def columns(keys: Sequence[str]) -> list[Column]:
    return [(k, HEADERS[k]) for k in keys]


COLUMNS = columns(JOB_KEYS)
LOW_UTIL_COLUMNS = columns(LOW_UTIL_KEYS)


def parse_since(text: str) -> timedelta:
    """``90s``, ``30m``, ``2h``, ``7d``, ``1w`` -> a timedelta (click error otherwise)."""
    try:
        return parse_span(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def parse_states(text: str | None) -> tuple[str, ...]:
    """``RUNNING,PD`` -> ``("RUNNING", "PENDING")``; a word Slurm does not know is refused."""
    try:
        return states_in(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--state") from None


def filters_from_options(options: dict[str, Any], now: datetime) -> JobFilters:
    """The command's options as the query's filters."""
    states = parse_states(options.get("state"))
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
    """One ``gpuwatch jobs`` row: ``job_id`` is what users type (``18_1`` for array tasks)."""
    return {
        "job_id": job.display_id,
        "name": job.name,
        "user": job.user,
        "account": job.account,
        "partition": job.partition,
        "state": job.state,
        "start_at": job.start_at,
        "end_at": job.end_at,
        "duration_s": job.duration_s,
        "gpus": job.gpus,
        "gpu_list": ",".join(job.gpu_list) or None,
        "mean_util_ratio": None if job.mean_util_ratio is None else round(job.mean_util_ratio, 4),
        "util_samples": job.util_samples,
    }


def low_util_row(job: LowUtilJob) -> dict[str, Any]:
    """One ``--low-util`` row: the job's facts and the verdict shown, by the documented keys."""
    return {key: getattr(job, key) for key in LOW_UTIL_KEYS}


def low_util_filters(options: dict[str, Any], now: datetime) -> LowUtilFilters:
    base = filters_from_options(options, now)
    return LowUtilFilters(
        **{f.name: getattr(base, f.name) for f in fields(base)},
        evaluated_since=base.since,
        cause=options.get("cause"),
        sort=options.get("sort") or "wasted",
    )


def duration_text(seconds: int | None) -> str | None:
    """``3720`` -> ``1h02m``: hours and minutes, the one duration format of tables."""
    if seconds is None:
        return None
    h, rest = divmod(int(seconds), 3600)
    return f"{h}h{rest // 60:02d}m"


def gpus_text(gpu_list: str) -> str:
    """``n07:0,n07:1,n08:0`` -> ``n07 gpu0,1; n08 gpu0`` (:func:`gpuwatch.views.gpu_names.gpus_per_node`,
    as the web view writes a job's GPUs): a node once, and spaces a narrow table can wrap at."""
    from gpuwatch.views.gpu_names import gpus_per_node

    pairs = []
    for ref in gpu_list.split(","):
        node, _, index = ref.rpartition(":")
        pairs.append((node, int(index)))
    return gpus_per_node(pairs)


def for_people(row: dict[str, Any]) -> dict[str, Any]:
    """A row formatted for a table: percent, ``1h02m``, two-decimal GPU-hours, the window's name
    ("latest phase"), a job's GPUs per node; JSON/CSV keep raw values."""
    out = dict(row)
    if row.get("gpu_list"):
        out["gpu_list"] = gpus_text(row["gpu_list"])
    if "duration_s" in row:
        out["duration_s"] = duration_text(row["duration_s"])
    if row.get("mean_util_ratio") is not None:
        out["mean_util_ratio"] = percent(row["mean_util_ratio"])
    for key in ("gpu_hours", "gpu_hours_wasted", "confidence"):
        if row.get(key) is not None:
            out[key] = f"{row[key]:.2f}"
    if row.get("window_kind") is not None:
        out["window_kind"] = WINDOW_NAMES.get(row["window_kind"], row["window_kind"])
    return out


#: what an empty table says instead
NO_JOBS = "no jobs match (widen --since, or drop a filter)"
#: rows a table shows without --limit or --all: a terminal is not a report (JSON/CSV get all)
TABLE_PAGE = 50


def cuts_table(fmt: OutputFormat, limit: int | None, everything: bool) -> bool:
    """Whether the output is a table cut to :data:`TABLE_PAGE` rows (no --limit, no --all)."""
    return fmt is OutputFormat.TABLE and limit is None and not everything


def more_line(more: int) -> str:
    """What a cut table says of the rows it left out ("" when none)."""
    if more <= 0:
        return ""
    return f"{more} more job(s) not shown: --limit N for more, --all for every one, or --format json/csv"


def page(rows: list[Any], fmt: OutputFormat, limit: int | None, everything: bool) -> tuple[list[Any], str]:
    """The rows to render and, for a table cut to :data:`TABLE_PAGE`, the line that says so."""
    if not cuts_table(fmt, limit, everything):
        return rows, ""
    return rows[:TABLE_PAGE], more_line(len(rows) - TABLE_PAGE)


def people_table(rows: list[dict[str, Any]], table_columns: list[Column], title: str, **layout: Any) -> str:
    """Rows as a table for people (:func:`for_people`), "no jobs match" when empty; ``layout``:
    how a narrow terminal fits it (``render``'s ``drop_first``, ``wrap``, ``min_widths``)."""
    people = [for_people(r) for r in rows]
    return render(people, table_columns, OutputFormat.TABLE, title=title, empty=NO_JOBS, **layout)


def render_jobs(rows: list[dict[str, Any]], fmt: OutputFormat, title: str) -> str:
    if fmt is OutputFormat.TABLE:
        return people_table(rows, COLUMNS, title, drop_first=JOBS_DROP_FIRST, wrap=JOBS_WRAP)
    return render(rows, COLUMNS, fmt)


def render_low_util(found: list[LowUtilJob], fmt: OutputFormat, title: str) -> str:
    rows = [low_util_row(job) for job in found]
    if fmt is OutputFormat.TABLE:
        layout = {"drop_first": LOW_UTIL_DROP_FIRST, "wrap": LOW_UTIL_WRAP, "min_widths": LOW_UTIL_MIN_WIDTHS}
        return people_table(rows, columns(LOW_UTIL_TABLE_KEYS), title, **layout)
    return render(rows, LOW_UTIL_COLUMNS, fmt)


def job_rows(engine: Any, filters: JobFilters, now: datetime) -> list[dict[str, Any]]:
    return [row_of(job) for job in jobs_query(engine, filters, now=now)]


@click.command("jobs")
@FORMAT_OPTION
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
@click.option("--limit", type=LIMIT, default=None, help="At most N jobs (newest first).")
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help=f"Every job in a table (without it a table stops at {TABLE_PAGE}; JSON and CSV always have all).",
)
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
def jobs(ctx: Context, fmt: str, everything: bool, **options: Any) -> None:
    """Running and recent Slurm jobs: their GPUs (node:index) and mean GPU utilization.

    With --low-util: the jobs the classifier found wasting GPUs, and why.
    """
    from gpuwatch.sql import migrate

    parse_since(options["since"])  # bad values fail before the database is opened
    parse_states(options.get("state"))
    engine = ctx.engine()
    if not migrate.is_up_to_date(engine):
        raise click.ClickException("database schema is not current; run: gpuwatch db upgrade")
    now = utcnow()
    output, limit = OutputFormat(fmt), options.get("limit")
    if options.get("low_util") or options.get("cause"):
        filters = low_util_filters(options, now)
        cut = cuts_table(output, limit, everything)
        # JSON of every row: written by PostgreSQL (low_util_json), else encoded here
        as_json = output is OutputFormat.JSON
        objects = low_util_json(engine, filters, now=now, keys=LOW_UTIL_KEYS) if as_json else None
        if objects is not None:
            click.echo(json_array(objects))
            return
        found = low_util_page(engine, replace(filters, limit=TABLE_PAGE) if cut else filters, now=now)
        shown, more = found.jobs, more_line(found.total - len(found.jobs)) if cut else ""
        title = f"Jobs with low GPU use (since {options['since']}, by {options['sort']})"
        click.echo(render_low_util(shown, output, title))
    else:
        rows = job_rows(engine, filters_from_options(options, now), now)
        shown, more = page(rows, output, limit, everything)
        click.echo(render_jobs(shown, output, f"Slurm jobs (since {options['since']})"))
    if more:
        click.echo(more)


def register(cli: click.Group) -> None:
    cli.add_command(jobs)
