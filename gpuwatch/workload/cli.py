"""``gpuwatch workload``: run one reference-workload scenario and print its throughput.

Registered through :data:`gpuwatch.cli.main.SUBCOMMAND_MODULES`. Importing this module (and
so every ``gpuwatch`` invocation) does not import torch: the scenario registry is torch-free
and the engine is imported only when a scenario runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from gpuwatch.workload.scenarios import SCENARIOS


def throughput_line(summary: dict) -> str:
    """One line for people: the scenario's throughput and where its time went."""
    precision = summary["precision"]
    computed = summary.get("compute_precision", precision)
    if computed != precision:
        precision = f"{precision}, computed in {computed}: this CPU has no native {precision}"
    return (
        f"{summary['scenario']} on {summary['device']}: {summary['samples_per_s']:.1f} samples/s "
        f"({summary['steps']} steps, batch {summary['batch_size']}, {precision}; "
        f"busy {summary['busy_share']:.0%}, wait {summary['wait_share']:.0%}, "
        f"comm {summary['comm_share']:.0%}, copy {summary['copy_share']:.0%}, "
        f"host {summary['host_share']:.0%})"
    )


@click.command("workload")
@click.option(
    "--scenario",
    type=click.Choice(sorted(SCENARIOS)),
    help="Which waste pattern to reproduce (see --list).",
)
@click.option("--duration", type=click.FloatRange(min=0.1), default=30.0, show_default=True, help="Seconds.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the JSON summary on stdout (the line goes to stderr)."
)
@click.option(
    "--activity-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Append the step timeline here as JSON lines (what the simulated bridge reads).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--list", "list_only", is_flag=True, help="List the scenarios and what each reproduces.")
def workload(
    scenario: str | None,
    duration: float,
    device: str,
    as_json: bool,
    activity_file: Path | None,
    seed: int,
    list_only: bool,
) -> None:
    """Run a reference torch workload that wastes (or uses well) its GPU in a known way.

    Needs the optional extra: pip install 'gpuwatch[workload]'. Runs on CUDA when present,
    else on the CPU.
    """
    if list_only:
        for name in sorted(SCENARIOS):
            click.echo(f"{name:18} {SCENARIOS[name].summary}")
        return
    if scenario is None:
        raise click.UsageError("--scenario is required (or --list)")
    from gpuwatch.workload._torch import TorchMissing
    from gpuwatch.workload.scenarios import run_scenario

    try:
        result = run_scenario(
            scenario, duration_s=duration, device=device, activity_file=activity_file, seed=seed
        )
    except TorchMissing as exc:
        raise click.ClickException(str(exc)) from None
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    line = throughput_line(result.summary)
    if as_json:
        click.echo(line, err=True)
        click.echo(json.dumps(result.summary, indent=2, sort_keys=True))
    else:
        click.echo(line)


def _fmt(value: object, kind: str = "ratio") -> str:
    if value is None:
        return "-"
    if kind == "ratio":
        return f"{float(value):.2f}"  # type: ignore[arg-type]
    return f"{float(value) / 1e9:.1f}G"  # type: ignore[arg-type]


def render_validate(report: object) -> str:
    """The confusion matrix and per-scenario evidence as rich tables (plain text)."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    from gpuwatch.workload.validate import ValidateReport

    assert isinstance(report, ValidateReport)
    buffer = StringIO()
    console = Console(file=buffer, width=200, no_color=True, highlight=False)
    label = "REAL GPU"
    if report.device.startswith("replay"):
        label = "REPLAY of recorded GPU readings through today's agent, daemon and classifier"
    elif report.simulated:
        label = "SIMULATION (GPU signals simulated from the workload's step timing)"
    console.print(f"gpuwatch validate: {label}; device {report.device}")
    matrix = report.confusion()
    got_causes = sorted({got for row in matrix.values() for got in row})
    table = Table(title="confusion matrix (rows: expected cause, columns: verdict)")
    table.add_column("expected")
    for cause in got_causes:
        table.add_column(cause, justify="right")
    for expected in sorted(matrix):
        table.add_row(expected, *[str(matrix[expected].get(c, "")) for c in got_causes])
    console.print(table)
    per = Table(title="scenarios")
    for col in ("scenario", "expected", "window", "verdict", "ok", "conf", "samples/s", "busy", "wait"):
        per.add_column(col)
    for col in ("util", "idle", "sm", "tensor", "power", "mem", "nvlink", "cpu", "min"):
        per.add_column(col, justify="right")
    for o in report.outcomes:
        w = o.workload
        f = o.features.get(o.window, {})
        per.add_row(
            o.scenario,
            o.expected,
            o.window,
            o.got or (o.error or "-")[:60],
            "ok" if o.ok else "MISS",
            _fmt(o.confidence),
            f"{w['samples_per_s']:.1f}" if "samples_per_s" in w else "-",
            _fmt(w.get("busy_share")),
            _fmt(w.get("wait_share")),
            _fmt(f.get("util_mean")),
            _fmt(f.get("idle_fraction_mean")),
            _fmt(f.get("sm_active")),
            _fmt(f.get("tensor_active")),
            _fmt(f.get("power_ratio")),
            _fmt(f.get("memory_used_ratio_max")),
            _fmt(f.get("nvlink_bytes_per_s"), "rate"),
            _fmt(f.get("cpu_ratio")),
            str(f.get("minutes", "-")),
        )
    console.print(per)
    for o in report.outcomes:
        console.print(f"{o.scenario}: {o.summary_text or o.error or 'no verdict'}")
    compression = ""
    if report.virtual_minutes is not None and report.outcomes:
        scale = report.outcomes[0].time_scale
        compression = f"; time compressed x{scale:g} ({report.virtual_minutes} virtual min per scenario)"
    passed = sum(o.ok for o in report.outcomes)
    console.print(
        f"{passed}/{len(report.outcomes)} classified as expected in {report.total_s:.0f} s{compression}; "
        f"thresholds {report.thresholds}"
    )
    return buffer.getvalue()


@click.command("validate")
@click.option("--scenarios", "scenario_list", help="Comma-separated scenarios (default: all).")
@click.option(
    "--duration", type=click.FloatRange(min=1.0), default=20.0, show_default=True,
    help="Seconds each scenario's workload runs (real time).",
)  # fmt: skip
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default="cpu",
    show_default=True,
    help="cpu: simulated GPUs driven by the workload, time-compressed; cuda: real GPU and NVML.",
)
@click.option(
    "--virtual-minutes", type=click.IntRange(min=3, max=60), default=None,
    help="Virtual minutes each run is stretched to (time compression = minutes*60/duration); "
    "default 6 on CPU, real time on CUDA.",
)  # fmt: skip
@click.option("--db", help="Database URL for the daemon (default: a temporary SQLite file).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Keep activity streams, workload summaries, logs and validate.json/.txt here.",
)
@click.option(
    "--cpus", type=click.IntRange(min=1), help="Cores the workload is pinned to (default: all available)."
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--replay",
    "replay_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Score a recorded run again (a `--out` folder of a CUDA run) without its GPU; needs no torch.",
)
def validate(
    scenario_list: str | None,
    duration: float,
    device: str,
    virtual_minutes: int | None,
    db: str | None,
    out_dir: Path | None,
    cpus: int | None,
    fmt: str,
    seed: int,
    replay_dir: Path | None,
) -> None:
    """Run scenarios under a daemon + agent, classify each one's job, print the confusion matrix.

    Exit status 1 when any scenario is not classified as expected. Needs the workload extra,
    except with --replay.
    """

    if replay_dir is not None:
        report = _replay(replay_dir, scenario_list, db)
        _finish(report, fmt, None)

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from gpuwatch.workload.validate import parse_scenarios, run_validate

    try:
        names = parse_scenarios(scenario_list)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--scenarios") from None
    label = "SIMULATION" if device == "cpu" else "GPU"
    console = Console(stderr=True)
    with Progress(
        TextColumn(f"[{label}] {{task.description}}"),
        BarColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=not console.is_terminal,
    ) as progress:
        overall = progress.add_task("all scenarios", total=len(names), status="")
        tasks: dict[str, int] = {}

        def on_progress(name: str, done: float, total: float) -> None:
            if name not in tasks:
                tasks[name] = progress.add_task(name, total=total, status="running")
            progress.update(tasks[name], completed=done, total=total)

        def on_done(outcome: object) -> None:
            from gpuwatch.workload.validate import ScenarioOutcome

            assert isinstance(outcome, ScenarioOutcome)
            if outcome.scenario not in tasks:
                tasks[outcome.scenario] = progress.add_task(outcome.scenario, total=1, status="")
            task = tasks[outcome.scenario]
            status = f"{outcome.got or outcome.error} ({'ok' if outcome.ok else 'MISS'})"
            progress.update(task, completed=progress.tasks[task].total, status=status)
            progress.advance(overall)

        report = run_validate(
            names,
            duration_s=duration,
            device=device,
            virtual_minutes=virtual_minutes,
            db_url=db,
            out_dir=out_dir,
            cpus=cpus,
            seed=seed,
            on_progress=on_progress,
            on_done=on_done,
        )
    _finish(report, fmt, out_dir)


def _replay(replay_dir: Path, scenario_list: str | None, db: str | None) -> object:
    from gpuwatch.workload.replay import replay_validate
    from gpuwatch.workload.validate import parse_scenarios

    try:
        names = parse_scenarios(scenario_list) if scenario_list else None
        return replay_validate(replay_dir, scenarios=names, db_url=db)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _finish(report: object, fmt: str, out_dir: Path | None) -> None:
    """Print the report (table or JSON), keep validate.txt in ``out_dir``; exit 1 on any miss."""
    import sys

    from gpuwatch.workload.validate import ValidateReport

    assert isinstance(report, ValidateReport)
    text = render_validate(report)
    if out_dir is not None:
        (out_dir / "validate.txt").write_text(text)
    if fmt == "json":
        click.echo(json.dumps(report.as_json(), indent=2, default=str))
    else:
        click.echo(text, nl=False)
    sys.exit(0 if report.ok else 1)


def register(cli: click.Group) -> None:
    cli.add_command(workload)
    cli.add_command(validate)
