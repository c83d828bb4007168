"""``gpuwatch processes NODE``: which processes held a node's GPUs, when, and how much memory.

The per-process readings are stored packed (``gpuwatch/sql/process_packs.py``: a row per
batch with an array per field), so SQL by hand needs an ``unnest`` of seven arrays; this
answers the usual forensics question ("which pid, of which job, held GPU 3 last night?")
directly. By default one line per (GPU, pid, job) with first and last stamp, readings, the
most GPU memory it held and its mean SM utilization (aggregated in SQL on PostgreSQL:
``sql.process_packs.summarize_processes``); ``--each`` lists every reading.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta, timezone
from typing import TYPE_CHECKING, Any

import click

from gpuwatch.cli.params import MINUTES, parse_time
from gpuwatch.cli.render import FORMAT_OPTION, Column, OutputFormat, percent, render
from gpuwatch.clock import utcnow

if TYPE_CHECKING:
    from gpuwatch.cli.main import Context
    from gpuwatch.sql.process_packs import ProcessReading, ProcessSummary

SUMMARY_COLUMNS = [
    ("gpu_index", "GPU"),
    ("pid", "pid"),
    ("job_id", "job"),
    ("first_ts", "first seen (UTC)"),
    ("last_ts", "last seen (UTC)"),
    ("readings", "readings"),
    ("max_used_memory_gib", "max GPU memory (GiB)"),
    ("mean_sm_util_ratio", "mean SM util"),
]
EACH_COLUMNS = [
    ("ts", "time (UTC)"),
    ("gpu_index", "GPU"),
    ("pid", "pid"),
    ("job_id", "job"),
    ("used_memory_gib", "GPU memory (GiB)"),
    ("sm_util_ratio", "SM util"),
    ("memory_util_ratio", "memory util"),
]
GIB = 2**30


def _gib(value: int | None) -> float | None:
    return None if value is None else round(value / GIB, 3)


def _row(x: Any, columns: list[Column], **derived: Any) -> dict[str, Any]:
    """A row keyed by ``columns``: ``x``'s attribute of that name, or the ``derived`` value."""
    return {key: derived[key] if key in derived else getattr(x, key) for key, _ in columns}


def _summary_rows(summaries: Iterable[ProcessSummary]) -> list[dict[str, Any]]:
    return [
        _row(
            x,
            SUMMARY_COLUMNS,
            max_used_memory_gib=_gib(x.max_used_memory_bytes),
            mean_sm_util_ratio=None if x.mean_sm_util_ratio is None else round(x.mean_sm_util_ratio, 4),
        )
        for x in summaries
    ]


def _each(readings: Iterable[ProcessReading]) -> list[dict[str, Any]]:
    return [_row(r, EACH_COLUMNS, used_memory_gib=_gib(r.used_memory_bytes)) for r in readings]


#: columns holding a ratio 0..1, which tables show as percent (JSON and CSV keep the ratio)
RATIO_COLUMNS = ("mean_sm_util_ratio", "sm_util_ratio", "memory_util_ratio")


def for_people(row: dict[str, Any]) -> dict[str, Any]:
    """A row for a table: ratios as percent, as every table shows utilization."""
    return {k: percent(v) if k in RATIO_COLUMNS else v for k, v in row.items()}


@click.command("processes")
@click.argument("node")
@click.option("--gpu", "gpu_index", type=click.IntRange(min=0), help="Only this GPU (NVML index).")
@click.option(
    "--since", type=MINUTES, default=60, show_default=True, help="Minutes back from --end (up to 100 years)."
)
@click.option("--end", "end_text", help="End of the window, ISO 8601 with a zone (default: now).")
@click.option("--each", is_flag=True, help="Every reading instead of one line per (GPU, pid, job).")
@FORMAT_OPTION
@click.pass_obj
def processes(
    ctx: Context, node: str, gpu_index: int | None, since: int, end_text: str | None, each: bool, fmt: str
) -> None:
    """Compute processes seen on NODE's GPUs: pid, job, when, GPU memory, SM utilization."""
    from gpuwatch.sql.nodes import get_node
    from gpuwatch.sql.process_packs import read_processes, summarize_processes

    end = (parse_time(end_text, "--end", zone_required=True) if end_text else utcnow()).astimezone(
        timezone.utc
    )
    start = end - timedelta(minutes=since)
    with ctx.engine().connect() as conn:
        found = get_node(conn, node)
        if found is None:
            raise click.ClickException(f"no node {node!r} (gpuwatch nodes lists them)")
        if each:
            readings = read_processes(conn, start, end, node_id=found.id)
            rows = _each(r for r in readings if gpu_index is None or r.gpu_index == gpu_index)
        else:
            rows = _summary_rows(summarize_processes(conn, start, end, found.id, gpu_index))
    columns = EACH_COLUMNS if each else SUMMARY_COLUMNS
    title = f"processes on {node}" + (f" GPU {gpu_index}" if gpu_index is not None else "")
    title += f", {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC"
    if not rows and OutputFormat(fmt) is OutputFormat.TABLE:
        click.echo(f"No compute process seen ({title}).")
        return
    if OutputFormat(fmt) is OutputFormat.TABLE:
        rows = [for_people(row) for row in rows]
    click.echo(render(rows, columns, OutputFormat(fmt), title=title))


def register(cli: click.Group) -> None:
    cli.add_command(processes)
