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
from gpuwatch.cli.params import parse_time
from gpuwatch.cli.render import FORMAT_OPTION, OutputFormat, percent, render
from gpuwatch.clock import utcnow
from gpuwatch.views.report import GroupBy, Prices, ReportRow, report_period, usage_report

#: the stable JSON/CSV keys; the group's own key is the --by value (user, account, partition)
REPORT_KEYS = (
    "jobs", "jobs_flagged", "gpu_hours", "gpu_hours_wasted", "wasted_share", "top_cause",
    "top_cause_gpu_hours", "gpu_efficiency", "cpu_efficiency", "memory_efficiency", "energy_kwh",
    "energy_estimated_share", "co2_kg", "cost", "cost_wasted", "wasted_share_last_week",
    "wasted_share_week_before", "jobs_advised_time", "jobs_advised_memory", "jobs_advised_cpus",
    "jobs_advised_gpus", "jobs_advised_gpu_size", "saving_gpu_hours",
)  # fmt: skip
#: the table's columns (the JSON and CSV carry every key): a terminal is narrower than a file
TABLE_KEYS = (
    "jobs", "jobs_flagged", "gpu_hours", "gpu_hours_wasted", "wasted_share", "trend", "top_cause",
    "gpu_efficiency", "cpu_efficiency", "memory_efficiency", "energy_kwh", "co2_kg", "cost", "next_time",
    "saving_gpu_hours",
)  # fmt: skip
#: what a narrow terminal's table leaves out first: the group, its GPU-hours wasted, the share
#: and the top cause stay
DROP_FIRST = ("co2_kg", "cost", "trend", "memory_efficiency", "cpu_efficiency", "energy_kwh", "next_time",
              "saving_gpu_hours", "jobs_flagged", "gpu_efficiency", "jobs", "gpu_hours")  # fmt: skip
#: the table's short headings
HEADINGS = {
    "jobs_flagged": "flagged", "gpu_hours": "GPU-h", "gpu_hours_wasted": "wasted GPU-h",
    "wasted_share": "wasted", "trend": "wasted, wk before > last", "top_cause": "top cause",
    "gpu_efficiency": "GPU eff", "cpu_efficiency": "CPU eff", "memory_efficiency": "mem eff",
    "energy_kwh": "kWh", "co2_kg": "CO2 kg", "next_time": "jobs to request less/more",
    "saving_gpu_hours": "fixes return GPU-h",
}  # fmt: skip


def report_rows(rows: list[ReportRow], by: GroupBy) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        data = asdict(row)
        out.append({by.value: data.pop("group"), **data})
    return out


def for_people(row: dict[str, Any], advised: list[tuple[str, int]]) -> dict[str, Any]:
    """A row's figures as the table prints them; ``advised``: :meth:`ReportRow.advised`."""
    out = dict(row)
    for key in ("gpu_hours", "gpu_hours_wasted", "top_cause_gpu_hours"):
        out[key] = f"{row[key]:.1f}"
    for key in (
        "wasted_share",
        "energy_estimated_share",
        "gpu_efficiency",
        "cpu_efficiency",
        "memory_efficiency",
    ):
        out[key] = percent(row[key])
    out["energy_kwh"] = f"{row['energy_kwh']:.2f}"
    out["co2_kg"] = "-" if row["co2_kg"] is None else f"{row['co2_kg']:.2f}"
    out["cost"] = "-" if row["cost"] is None else f"{row['cost']:.2f} ({row['cost_wasted']:.2f} wasted)"
    out["trend"] = trend_text(row["wasted_share_week_before"], row["wasted_share_last_week"])
    out["next_time"] = ", ".join(f"{what} {n}" for what, n in advised) or "-"
    out["saving_gpu_hours"] = "-" if row["saving_gpu_hours"] is None else f"{row['saving_gpu_hours']:.1f}"
    return out


def trend_text(before: float | None, last: float | None) -> str:
    """Wasted share week over week: "31% > 12%"; "-" where a week held no GPU-hours."""
    if before is None or last is None:
        return "-"
    return f"{percent(before)} > {percent(last)}"


def _heading(key: str, currency: str) -> str:
    if key == "cost":
        return f"cost ({currency})" if currency else "cost"
    return HEADINGS.get(key, key.replace("_", " "))


def _parse_until(text: str | None, now: datetime) -> datetime:
    if not text:
        return now
    return parse_time(text, "--until", zone_required=True)


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
    """GPU-hours held and wasted per user, account or partition: cause, efficiency, energy, cost, trend."""
    from gpuwatch.sql import migrate

    group = GroupBy(by)
    start, end = report_period(parse_since(since), _parse_until(until, utcnow()))
    engine = ctx.engine()
    if not migrate.is_up_to_date(engine):
        raise click.ClickException("database schema is not current; run: gpuwatch db upgrade")
    config = ctx.settings.report
    prices = Prices(gpu_hour=config.gpu_hour_price, billing_hour=config.billing_hour_price)
    found = usage_report(engine, group, start, end, config.grid_co2_kg_per_kwh, prices)
    rows = report_rows(found, group)
    output = OutputFormat(fmt)
    keys = REPORT_KEYS
    if output is OutputFormat.TABLE:  # CO2 and cost only where the site configured them
        unset = {
            "co2_kg": config.grid_co2_kg_per_kwh,
            "cost": config.gpu_hour_price or config.billing_hour_price,
        }
        keys = tuple(k for k in TABLE_KEYS if unset.get(k, True) is not None)
    columns = [(group.value, group.value), *((key, _heading(key, config.currency)) for key in keys)]
    if output is OutputFormat.TABLE:
        shown = [for_people(r, row.advised()) for r, row in zip(rows, found, strict=True)]
    else:
        shown = rows
    title = f"GPU-hours by {group.value}, {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"
    empty = f"no GPU jobs ran in that period ({since})"
    click.echo(render(shown, columns, output, title=title, empty=empty, drop_first=DROP_FIRST))


def register(cli: click.Group) -> None:
    cli.add_command(report)
