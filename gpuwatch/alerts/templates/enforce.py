"""Enforcement notices: the warning before a cancel, and the cancel itself."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpuwatch.alerts.templates import format as fmt


def warn_subject(job_id: str) -> str:
    return f"[gpuwatch] Job {job_id} will be cancelled: its GPUs are idle"


def warn_email(
    job_id: str,
    user: str | None,
    gpus: int | None,
    idle_since: datetime,
    cancel_at: datetime,
    link: str | None,
) -> dict[str, str]:
    n = gpus if gpus is not None else "its"
    h = fmt.h
    text = [
        f"all {n} GPU(s) of your Slurm job {job_id} have been at 0% utilization since "
        f"{fmt.when(idle_since)}.",
        f"If they are still idle at {fmt.when(cancel_at)}, the job will be cancelled (scancel) so that "
        "others can use the GPUs.",
        "",
        f"If the job is finished, please end it now: scancel {job_id}",
        "If it is waiting for something on purpose, reply to this message.",
    ]
    html = [
        f"<p>all {h(n)} GPU(s) of your Slurm job <b>{h(job_id)}</b> have been at 0% utilization since "
        f"{h(fmt.when(idle_since))}.</p>",
        f"<p><b>If they are still idle at {h(fmt.when(cancel_at))}, the job will be cancelled</b> "
        "(scancel) so that others can use the GPUs.</p>",
        f"<p>If the job is finished, please end it now: <code>scancel {h(job_id)}</code><br>"
        "If it is waiting for something on purpose, reply to this message.</p>",
    ]
    return _to_owner(user, text, html, link)


def cancel_subject(job_id: str) -> str:
    return f"[gpuwatch] Job {job_id} was cancelled: its GPUs stayed idle"


def cancel_email(job_id: str, user: str | None, idle_since: datetime, link: str | None) -> dict[str, str]:
    h = fmt.h
    text = [
        f"your Slurm job {job_id} was cancelled: its GPUs had been at 0% utilization since "
        f"{fmt.when(idle_since)}, after a warning.",
    ]
    html = [
        f"<p>your Slurm job <b>{h(job_id)}</b> was cancelled: its GPUs had been at 0% utilization since "
        f"{h(fmt.when(idle_since))}, after a warning.</p>",
    ]
    return _to_owner(user, text, html, link)


def _to_owner(user: str | None, text: list[str], html: list[str], link: str | None) -> dict[str, str]:
    """The job owner's email around ``text`` / ``html``: greeting, job link, why they get it."""
    h = fmt.h
    footer = "gpuwatch. You get this because you submitted the job."
    lines = [f"Hello {user or ''},".replace(" ,", ","), "", *text]
    if link:
        lines += ["", f"Job page: {link}"]
    lines += ["", "-- ", footer]
    html_doc = "\n".join(
        [
            "<!DOCTYPE html>",
            '<html><body style="font-family:sans-serif;max-width:680px">',
            f"<p>Hello {h(user or '')},</p>",
            *html,
            *([f'<p><a href="{h(link)}">Job page</a></p>'] if link else []),
            f'<p style="color:#666;font-size:small">{footer}</p>',
            "</body></html>",
        ]
    )
    return {"text": "\n".join(lines) + "\n", "html": html_doc + "\n"}


def admin_slack(
    action: str, job_id: str, user: str | None, account: str | None, idle_since: datetime, dry_run: bool
) -> dict[str, Any]:
    verb = {"warn": "warned", "cancel": "cancelled"}[action]
    prefix = "[dry run] would have " if dry_run else ""
    text = (
        f"{prefix}{verb} job {job_id} of {user or '?'} ({account or '?'}): all GPUs idle since "
        f"{fmt.when(idle_since)}"
    )
    return {
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": f":no_entry: {fmt.mrkdwn(text)}"}}],
    }
