"""``gpuwatch job ID``: one job explained — its GPUs, its verdicts, its utilization over time.

Renders :func:`gpuwatch.views.job_view` (the web view's job page renders the same): the job,
per-GPU means over its run, the latest evaluation's verdicts (healthy included) and a
timeline. ``--plot FILE.png`` draws the timeline as a chart with matplotlib
(:mod:`gpuwatch.cli.plot`, the optional extra ``plot``).
"""

from __future__ import annotations

import textwrap
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gpuwatch.cli.params import parse_time
from gpuwatch.cli.render import OutputFormat, format_option, percent, table_width
from gpuwatch.clock import utcnow
from gpuwatch.views.evaluations import WINDOW_NAMES
from gpuwatch.views.evidence import evidence_sentences
from gpuwatch.views.summary_text import summary_rows

if TYPE_CHECKING:
    from gpuwatch.cli.main import Context
    from gpuwatch.config.thresholds import Thresholds

BLOCKS = "▁▂▃▄▅▆▇█"
COLUMNS = 60
#: the narrowest text the summary and verdicts are folded to, however narrow the terminal
MIN_WIDTH = 40
GIB = 2**30


def spark(values: list[float | None]) -> str:
    """One character per value: ▁ (0) .. █ (100 %), ' ' for no data."""
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        else:
            out.append(BLOCKS[min(len(BLOCKS) - 1, max(0, int(v * len(BLOCKS))))])
    return "".join(out)


def job_detail(
    engine: Any, job_id: str, now: datetime, columns: int = COLUMNS, thresholds: Thresholds | None = None
) -> dict[str, Any] | None:
    """Everything the command shows, as plain data (the JSON output); None for an unknown job.
    ``thresholds``: the site's classifier thresholds (which GPUs count as idle)."""
    from dataclasses import asdict

    from gpuwatch.views import job_view

    view = job_view(engine, job_id, now, columns=columns, thresholds=thresholds)
    if view is None:
        return None
    j = view.job
    info = {
        "job_id": job_id,
        "raw_job_id": j.raw_job_id,
        "name": j.name,
        "user": j.user,
        "account": j.account,
        "partition": j.partition,
        "state": j.state,
        "start_at": j.start_at,
        "end_at": j.end_at,
        "duration_s": j.duration_s,
    }
    timeline = {
        "start": view.start,
        "end": view.end,
        "minutes": view.minutes,
        "column_s": view.column_s,
        "series": {f"{ref.node}:{ref.gpu_index}": values for ref, values in view.timeline.items()},
    }
    verdict_rows = [
        {k: getattr(v, k) for k in VERDICT_KEYS}
        for v in (view.evaluation.verdicts if view.evaluation else ())
    ]
    energy = view.energy
    shown = view.evaluation.shown if view.evaluation else None
    return {
        "job": info,
        "summary": None if view.usage is None else view.usage.as_dict(),
        "verdict": None
        if shown is None
        else {k: getattr(shown, k) for k in ("cause", "window_kind", "summary", "fix", "gpu_hours_wasted")},
        "saving": None if view.saving is None else view.saving.as_dict(),
        "advice": [a.as_dict() for a in view.advice],
        "summary_text": summary_rows(view),
        "gpus": [{**asdict(g), "xid_codes": list(g.xid_codes), "fault": g.fault} for g in view.gpus],
        "energy": None
        if energy is None
        else {"kwh": round(energy.kwh, 4), "estimated_share": round(energy.estimated_share, 4)},
        "verdicts": verdict_rows,
        "timeline": timeline,
    }


#: the keys of each verdict in the JSON output
VERDICT_KEYS = ("window_kind", "window_start", "window_end", "cause", "confidence", "gpus", "gpu_hours",
                "gpu_hours_wasted", "mean_util_ratio", "summary", "fix", "evidence",
                "evaluated_at")  # fmt: skip


def _power(mean: float | None, limit: float | None) -> str:
    if mean is None:
        return "-"
    return f"{mean:.0f}" + (f" / {limit:.0f}" if limit else "")


def _when(v: datetime | None) -> str:
    return "-" if v is None else v.strftime("%Y-%m-%d %H:%M:%S")


#: what a narrow terminal's per-GPU table leaves out first (the fault, the node, the GPU and
#: its utilization stay)
GPU_DROP_FIRST = ("energy", "tensor", "power", "mem", "sm")


def render_text(d: dict[str, Any]) -> str:
    from gpuwatch.cli.render import render

    width = max(MIN_WIDTH, table_width())
    j = d["job"]
    who = f"  user {j['user'] or '-'}  account {j['account'] or '-'}  partition {j['partition'] or '-'}"
    name = f" ({j['name']})" if j["name"] else ""
    lines = [
        wrapped("", f"Job {j['job_id']}{name}{who}  state {j['state'] or '-'}", width, indent=2),
        f"  start {_when(j['start_at'])}  end {_when(j['end_at'])}  (UTC)",
        *(wrapped(f"  {label:<12} ", text, width) for label, text in d["summary_text"]),
        "",
    ]  # fmt: skip
    gpu_rows = [
        {
            "node": g["node"],
            "gpu": g["gpu_index"],
            "util": percent(g["util_gpu_mean"]),
            "sm": percent(g["sm_active_mean"]),
            "tensor": percent(g["tensor_active_mean"]),
            "mem": "-"
            if g["memory_total_bytes"] is None
            else f"{(g['memory_used_bytes_max'] or 0) / GIB:.1f} / {g['memory_total_bytes'] / GIB:.1f}",
            "power": _power(g["power_watts_mean"], g["power_limit_watts"]),
            "energy": "-" if g["energy_kwh"] is None else f"{g['energy_kwh']:.3f}",
            "fault": g["fault"],
        }
        for g in d["gpus"]
    ]  # fmt: skip
    cols = [("node", "node"), ("gpu", "GPU"), ("util", "mean util"), ("sm", "SM active"),
            ("tensor", "tensor"), ("mem", "memory GiB max / total"), ("power", "power W mean / limit"),
            ("energy", "energy kWh")]  # fmt: skip
    if any(row["fault"] for row in gpu_rows):  # a column only where a GPU had one
        cols.append(("fault", "fault"))
    table = render(
        gpu_rows, cols, OutputFormat.TABLE, title="GPUs", drop_first=GPU_DROP_FIRST, wrap=("fault",)
    )
    lines.append(table if gpu_rows else "No GPUs known.")
    lines.append("")
    if not d["verdicts"]:
        lines.append("No verdicts yet (not evaluated, or inside the grace period).")
    else:
        lines.append(f"Verdicts (evaluated {_when(d['verdicts'][0]['evaluated_at'])} UTC):")
        lines += verdict_lines(d["verdicts"], width)
    tl = d["timeline"]
    if tl and tl["series"]:
        lines.append("")
        lines.append(
            wrapped(
                "",
                f"GPU utilization {_when(tl['start'])} .. {_when(tl['end'])} UTC "
                f"(1 column = {tl['column_s'] / 60:.3g} min; ▁ 0 % .. █ 100 %, blank: no data)",
                width,
            )
        )
        width = max(len(k) for k in tl["series"])
        for label, values in tl["series"].items():
            lines.append(f"  {label:<{width}} |{spark(values)}|")
    return "\n".join(lines)


def verdict_lines(verdicts: list[dict[str, Any]], width: int) -> list[str]:
    """Each verdict's header, evidence (its sentences) and fix, wrapped to ``width``. A window
    whose evidence and fix read word for word as an earlier window's says so in one line
    instead of printing them again (a steady job's recent window repeats its whole job)."""
    lines: list[str] = []
    told: dict[tuple[str, tuple[str, ...], str | None], str] = {}
    for v in verdicts:
        window = WINDOW_NAMES.get(v["window_kind"], v["window_kind"])
        head = (
            f"[{window}] {v['cause']}  confidence {v['confidence']:.2f}  "
            f"GPU-h wasted {v['gpu_hours_wasted'] or 0:.2f} of {v['gpu_hours'] or 0:.2f}  "
            f"mean util {percent(v['mean_util_ratio'])}"
        )
        lines.append(wrapped("  ", head, width, indent=4))
        sentences = tuple(evidence_sentences(v["evidence"]))
        key = (v["summary"], sentences, v["fix"])
        if key in told:
            lines.append(f"    evidence and fix: as [{told[key]}] above")
            continue
        told[key] = window
        lines.append(wrapped("    evidence: ", v["summary"], width))
        lines += [wrapped("      - ", sentence, width) for sentence in sentences]
        if v["fix"]:
            lines.append(wrapped("    fix: ", v["fix"], width))
    return lines


def wrapped(prefix: str, text: str, width: int, indent: int | None = None) -> str:
    """``prefix`` + ``text`` folded at spaces to ``width``, continuation lines ``indent`` spaces
    in (default: under the text's first character); a word longer than the room is left whole
    (a path, a URL)."""
    hanging = " " * (len(prefix) if indent is None else indent)
    return textwrap.fill(
        text, width, initial_indent=prefix, subsequent_indent=hanging,
        break_long_words=False, break_on_hyphens=False,
    ) or prefix.rstrip()  # fmt: skip


def _fault_note(gpu: dict[str, Any]) -> str:
    """``XID 79, lost``: a faulted GPU's legend note (the table has the whole sentence)."""
    parts = [f"XID {', '.join(map(str, gpu['xid_codes']))}"] if gpu["xid_codes"] else []
    return ", ".join([*parts, *(["lost"] if gpu["lost_samples"] else [])])


def _plot(d: dict[str, Any], path: Path) -> None:
    """``--plot``: the timeline as a PNG, titled with the job and its verdict."""
    from gpuwatch.cli.plot import PlotUnavailable, utilization_figure, write_png

    timeline = d["timeline"]
    shown = d.get("verdict") or {}
    title = f"job {d['job']['job_id']}: GPU utilization"
    if shown.get("cause"):
        title += f" — {shown['cause']} ({WINDOW_NAMES.get(shown['window_kind'], shown['window_kind'])})"
    try:
        faults = {f"{g['node']}:{g['gpu_index']}": _fault_note(g) for g in d["gpus"] if g["fault"]}
        figure = utilization_figure(
            title, timeline["start"], timeline["column_s"], timeline["series"], faults=faults
        )
        write_png(figure, path)
    except PlotUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:  # a folder that does not exist, no permission, a full disk
        raise click.ClickException(f"cannot write --plot {path}: {exc.strerror or exc}") from None
    click.echo(f"wrote {path} ({len(timeline['series'])} GPU(s))", err=True)


@click.command("job")
@click.argument("job_id")
@format_option(OutputFormat.TABLE, OutputFormat.JSON, help="Text for people, or JSON for tools.")
@click.option(
    "--plot", type=click.Path(dir_okay=False, path_type=Path), help="Also write the timeline as a PNG."
)
@click.option("--at", "at", help="Show the job as of this ISO 8601 time (default: now); for replayed data.")
@click.option("--columns", type=click.IntRange(min=10, max=400), default=COLUMNS, show_default=True,
              help="Timeline width in characters.")  # fmt: skip
@click.pass_obj
def job(ctx: Context, job_id: str, fmt: str, plot: Path | None, at: str | None, columns: int) -> None:
    """One job: per-GPU summary, every verdict with evidence and fix, a utilization timeline."""
    import json

    from gpuwatch.cli.render import _plain
    from gpuwatch.sql import migrate

    now = parse_time(at, "--at", zone_required=False) if at else utcnow()
    engine = ctx.engine()
    if not migrate.is_up_to_date(engine):
        raise click.ClickException("database schema is not current; run: gpuwatch db upgrade")
    d = job_detail(engine, job_id, now, columns, ctx.settings.classify)
    if d is None:
        raise click.ClickException(f"job {job_id} is not known (no Slurm row, attribution or verdict)")
    if plot is not None:
        _plot(d, plot)
    if fmt == "json":
        click.echo(json.dumps(d, indent=2, default=_plain))
    else:
        click.echo(render_text(d))


def register(cli: click.Group) -> None:
    cli.add_command(job)
