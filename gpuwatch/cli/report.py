"""``gpuwatch report``: GPU-hours held and wasted by user, account or partition over a period.

The figures come from :func:`gpuwatch.views.usage_report` (docs/cli.md lists the JSON keys).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

import click

from gpuwatch.cli.jobs import parse_since
from gpuwatch.cli.main import Context
from gpuwatch.cli.render import FORMAT_OPTION, OutputFormat, render
from gpuwatch.clock import utcnow
from gpuwatch.views.report import GroupBy, ReportRow, usage_report

#: the stable JSON/CSV keys; the group's own key is the --by value (user, account, partition)
REPORT_KEYS = (
    "jobs", "jobs_flagged", "gpu_hours", "gpu_hours_wasted", "wasted_share", "top_cause",
    "top_cause_gpu_hours", "energy_kwh", "energy_estimated_share", "co2_kg",
)  # fmt: skip


def report_rows(rows: list[ReportRow], by: GroupBy) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        data = asdict(row)
        out.append({by.value: data.pop("group"), **data})
    return out


def for_people(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    for key in ("gpu_hours", "gpu_hours_wasted", "top_cause_gpu_hours"):
        out[key] = f"{row[key]:.1f}"
    for key in ("wasted_share", "energy_estimated_share"):
        if row[key] is not None:
            out[key] = f"{100 * row[key]:.0f}%"
    out["energy_kwh"] = f"{row['energy_kwh']:.2f}"
    out["co2_kg"] = "-" if row["co2_kg"] is None else f"{row['co2_kg']:.2f}"
    return out


def _parse_until(text: str | None, now: datetime) -> datetime:
    if not text:
        return now
    try:
        until = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: use an ISO 8601 time, e.g. 2026-12-01T00:00Z", param_hint="--until"
        ) from None
    if until.tzinfo is None:
        raise click.BadParameter(f"{text!r}: give a time zone (Z or +01:00)", param_hint="--until")
    return until


@click.command("report")
@click.option(
    "--by", type=click.Choice([g.value for g in GroupBy]), default=GroupBy.USER.value, show_default=True
)
@click.option(
    "--since", default="7d", show_default=True, help="The period's length before --until: 1d, 7d, 4w."
)
@click.option("--until", help="The period's end, ISO 8601 with a zone (default: now).")
@FORMAT_OPTION
@click.pass_obj
def report(ctx: Context, by: str, since: str, until: str | None, fmt: str) -> None:
    """GPU-hours held and wasted per user, account or partition, with the top cause."""
    from gpuwatch.sql import migrate

    group = GroupBy(by)
    end = _parse_until(until, utcnow())
    start = end - parse_since(since)
    engine = ctx.engine()
    if not migrate.is_up_to_date(engine):
        raise click.ClickException("database schema is not current; run: gpuwatch db upgrade")
    co2 = ctx.settings.report.grid_co2_kg_per_kwh
    rows = report_rows(usage_report(engine, group, start, end, co2), group)
    columns = [(group.value, group.value), *((key, key.replace("_", " ")) for key in REPORT_KEYS)]
    output = OutputFormat(fmt)
    shown = [for_people(r) for r in rows] if output is OutputFormat.TABLE else rows
    title = f"GPU-hours by {group.value}, {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"
    click.echo(render(shown, columns, output, title=title, empty=f"no GPU jobs ran in that period ({since})"))


def register(cli: click.Group) -> None:
    cli.add_command(report)
