"""A job's ``seff``-style summary as (label, sentence) rows: the same words on every surface.

``gpuwatch job ID`` prints the rows as aligned lines and the web view's job page as a table;
both call :func:`summary_rows`, so the summary cannot say one thing in the terminal and another
in the browser. The numbers come from :class:`~gpuwatch.views.usage.JobUsage`, the verdict is
the evaluation's shown one, the saving and the advice are :mod:`gpuwatch.views.advice`'s.
"""

from __future__ import annotations

from gpuwatch.cards import GIB
from gpuwatch.views.energy import JobEnergy
from gpuwatch.views.job import JobView


def clock(seconds: int | None) -> str:
    """Slurm's elapsed form: ``[D-]HH:MM:SS``."""
    if seconds is None:
        return "-"
    days, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    return (f"{days}-" if days else "") + f"{h:02d}:{rest // 60:02d}:{rest % 60:02d}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _of(used: float | None, total: float | None, unit: str = "", scale: float = 1.0) -> str:
    """ "7.9 of 8.0 cores (99%)"; without a total "7.9 cores"; "-" when nothing was measured."""
    if used is None:
        return "-"
    if not total:
        return f"{used / scale:.1f}{unit}"
    return f"{used / scale:.1f} of {total / scale:.1f}{unit} ({100 * used / total:.0f}%)"


def energy_text(energy: JobEnergy | None) -> str:
    """The run's GPU energy, and how much of it is estimated from power (views/energy.py)."""
    if energy is None:
        return "not measured"
    share = energy.estimated_share
    return f"{energy.kwh:.3f} kWh" + (f" ({100 * share:.0f}% estimated from power)" if share >= 0.005 else "")


def summary_rows(view: JobView) -> list[tuple[str, str]]:
    """Elapsed against the limit, GPU/CPU/memory use against the request, GPU-hours held and
    wasted, energy, the verdict and its fix, the saving, and what to request next time."""
    u = view.usage
    shown = view.evaluation.shown if view.evaluation else None
    rows: list[tuple[str, str]] = []
    if u is not None:
        limit = f" of {clock(u.time_limit_s)} limit" if u.time_limit_s else ""
        share = f" ({_pct(u.time_used_share)})" if u.time_used_share is not None else ""
        sm = f", SM active {_pct(u.sm_active)}" if u.sm_active is not None else ""
        idle = f", {len(u.idle_gpus)} idle the whole run" if u.idle_gpus else ""
        held = "-" if u.gpu_hours_allocated is None else f"{u.gpu_hours_allocated:.2f} held"
        wasted = (
            f"{shown.gpu_hours_wasted or 0:.2f} wasted ({shown.cause})"
            if shown
            else "none wasted (no waste verdict)"
        )
        gpu_memory = _of(u.gpu_memory_used_max_bytes, u.gpu_memory_total_bytes, " GiB", GIB)
        host_memory = _of(u.memory_used_max_bytes, u.memory_requested_bytes, " GiB", GIB)
        rows += [
            ("Elapsed", f"{clock(u.elapsed_s)}{limit}{share}"),
            ("GPUs", f"{u.gpus} x {u.gpu_model or 'GPU'}: utilization {_pct(u.gpu_efficiency)}{sm}{idle}"),
            ("GPU-hours", f"{held}, {wasted}"),
            ("GPU memory", f"peak {gpu_memory} on one GPU"),
            ("CPU", f"{_of(u.cpu_cores_used, u.cpu_cores_allocated, ' cores')} used on average"),
            ("Memory", f"peak {host_memory} per node (page cache included)"),
        ]  # fmt: skip
    rows.append(("GPU energy", energy_text(view.energy)))
    if shown is not None:
        rows.append(("Verdict", f"{shown.cause}: {shown.summary}"))
        if shown.fix:
            rows.append(("Fix", shown.fix))
    if view.saving is not None:
        rows.append(("Saving", f"about {view.saving.gpu_hours:.2f} GPU-h if fixed: {view.saving.basis}"))
    rows += [("Next time" if i == 0 else "", f"{a.request}: {a.reason}") for i, a in enumerate(view.advice)]
    return rows
