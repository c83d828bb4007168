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
    return (
        f"{summary['scenario']} on {summary['device']}: {summary['samples_per_s']:.1f} samples/s "
        f"({summary['steps']} steps, batch {summary['batch_size']}, {summary['precision']}; "
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


def register(cli: click.Group) -> None:
    cli.add_command(workload)
