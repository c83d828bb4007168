"""A notice about one job's verdict: email (text + HTML) and Slack Block Kit.

Everything shown comes from the verdict row (summary, evidence, fix, GPU-hours) and the
job's ``slurm_jobs`` row; the wording per cause comes from :mod:`.causes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuwatch.alerts.templates import format as fmt
from gpuwatch.alerts.templates.causes import cause_text
from gpuwatch.views import WINDOW_NAMES, evidence_sentences


@dataclass(frozen=True)
class JobFacts:
    """One verdict, with the job it is about."""

    job_id: str
    cause: str
    confidence: float
    window_kind: str
    window_start: datetime
    window_end: datetime
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str | None = None
    gpus: int | None = None
    gpu_hours: float | None = None
    gpu_hours_wasted: float | None = None
    mean_util_ratio: float | None = None
    verdict_id: int | None = None
    job_name: str | None = None
    user_name: str | None = None
    account: str | None = None
    partition: str | None = None
    state: str | None = None
    #: a notice about a job the recipient heard of before: why this one follows
    #: (``alerts/rules.follow_up``: an escalation, or a cause that replaces "unknown")
    follows: str | None = None
    #: every GPU idle and nothing cancels idle jobs (enforcement off): say how to end the job
    suggest_scancel: bool = False

    @property
    def duration_s(self) -> float:
        return (self.window_end - self.window_start).total_seconds()

    @property
    def idle_gpus(self) -> int:
        return idle_count(self.evidence)


def idle_count(evidence: object) -> int:
    """How many GPUs a verdict's evidence names idle (0 for other causes)."""
    signals = evidence.get("signals") if isinstance(evidence, dict) else None
    idle = signals.get("idle_gpus") if isinstance(signals, dict) else None
    return len(idle) if isinstance(idle, list) else 0


WHY = {
    "user": "You get this because you submitted the job.",
    "owner": "You get this as the owner of Slurm account {account}.",
    "admin": "Sent to the GPU administrators.",
}


def context(f: JobFacts) -> dict[str, str]:
    """The ``$placeholders`` a cause text may use."""
    ctx = {k: fmt.value_by_unit(k, v) for k, v in f.evidence.items() if not isinstance(v, dict)}
    ctx.update(
        job_id=f.job_id,
        job_name=f.job_name or "",
        user=f.user_name or "?",
        account=f.account or "?",
        partition=f.partition or "?",
        gpus=str(f.gpus) if f.gpus is not None else "?",
        idle=str(f.idle_gpus) if f.idle_gpus else "?",
        mean_util=fmt.percent(f.mean_util_ratio),
        duration=fmt.duration(f.duration_s),
        gpu_hours_wasted=fmt.number(f.gpu_hours_wasted),
        summary=f.summary,
    )
    return ctx


def title(f: JobFacts) -> str:
    return cause_text(f.cause).title


def meaning(f: JobFacts) -> str:
    return cause_text(f.cause).meaning.safe_substitute(context(f))


def fix(f: JobFacts) -> str:
    text = f.fix or cause_text(f.cause).fix.safe_substitute(context(f))
    if f.suggest_scancel and "scancel" not in text:
        text = f"If its work is done, end the job now: scancel {f.job_id}. {text}"
    return text


def _job_label(f: JobFacts) -> str:
    return f'{f.job_id} "{f.job_name}"' if f.job_name else f.job_id


def subject(f: JobFacts) -> str:
    wasted = f" - {fmt.number(f.gpu_hours_wasted)} GPU-hours wasted" if f.gpu_hours_wasted else ""
    update = "Update: " if f.follows else ""
    return f"[gpuwatch] {update}Job {f.job_id}: {title(f)}{wasted}"


def _facts(f: JobFacts) -> list[tuple[str, str]]:
    return [
        ("Cause", f"{title(f)} ({f.cause}), confidence {fmt.percent(f.confidence)}"),
        (
            "Job",
            f"{_job_label(f)}, user {f.user_name or '?'}, account {f.account or '?'}, "
            f"partition {f.partition or '?'}",
        ),
        (
            "Window",
            f"{fmt.when(f.window_start)} to {fmt.when(f.window_end)} ({fmt.duration(f.duration_s)}, "
            f"{WINDOW_NAMES.get(f.window_kind, f.window_kind)})",
        ),
        (
            "GPUs",
            f"{f.gpus if f.gpus is not None else '?'}, mean utilization {fmt.percent(f.mean_util_ratio)}",
        ),
        ("GPU-hours", f"{fmt.number(f.gpu_hours)} held, {fmt.number(f.gpu_hours_wasted)} wasted"),
    ]


def _opening(f: JobFacts, recipient_kind: str) -> str:
    if recipient_kind == "user":
        return f"Hello {f.user_name or ''},".replace(" ,", ",") + (
            f"\n\nyour Slurm job {_job_label(f)} is not making good use of its GPUs."
        )
    if recipient_kind == "owner":
        return (
            f"Hello,\n\na Slurm job of account {f.account or '?'} (job {_job_label(f)}, user "
            f"{f.user_name or '?'}) is not making good use of its GPUs."
        )
    who = f"{f.user_name or '?'} ({f.account or '?'})"
    return f"Job {_job_label(f)} of {who} is not making good use of its GPUs."


def email(f: JobFacts, recipient_kind: str, link: str | None, cooldown_note: str = "") -> dict[str, str]:
    why = WHY.get(recipient_kind, "").format(account=f.account or "?")
    evidence = evidence_sentences(f.evidence)
    text_lines = [
        _opening(f, recipient_kind),
        "",
        *([f.follows, ""] if f.follows else []),
        f"What we saw: {f.summary}",
        "",
        *(f"{k + ':':<11}{v}" for k, v in _facts(f)),
        "",
        f"What it means: {meaning(f)}",
        "",
        f"How to fix it: {fix(f)}",
        "",
        "What we measured:",
        *(f"  - {sentence}" for sentence in evidence),
    ]
    if link:
        text_lines += ["", f"Job page: {link}"]
    text_lines += ["", "-- ", f"gpuwatch. {why} {cooldown_note}".strip()]
    h = fmt.h
    facts_html = "".join(
        f'<tr><th align="left" style="padding-right:12px">{h(k)}</th><td>{h(v)}</td></tr>'
        for k, v in _facts(f)
    )
    evidence_html = "".join(f"<li>{h(sentence)}</li>" for sentence in evidence)
    opening_html = "<br>".join(h(p) for p in _opening(f, recipient_kind).split("\n\n"))
    html_parts = [
        "<!DOCTYPE html>",
        '<html><body style="font-family:sans-serif;max-width:680px">',
        f"<p>{opening_html}</p>",
        *([f"<p><b>{h(f.follows)}</b></p>"] if f.follows else []),
        f"<h2>{h(title(f))}</h2>",
        f"<p><b>What we saw:</b> {h(f.summary)}</p>",
        f"<table>{facts_html}</table>",
        f"<p><b>What it means:</b> {h(meaning(f))}</p>",
        f"<p><b>How to fix it:</b> {h(fix(f))}</p>",
        f"<h3>What we measured</h3><ul>{evidence_html}</ul>",
    ]
    if link:
        html_parts.append(f'<p><a href="{h(link)}">Job page</a></p>')
    html_parts += [
        f'<p style="color:#666;font-size:small">gpuwatch. {h(why)} {h(cooldown_note)}</p>'.replace(
            " </p>", "</p>"
        ),
        "</body></html>",
    ]
    return {"text": "\n".join(text_lines) + "\n", "html": "\n".join(html_parts) + "\n"}


def slack(f: JobFacts, link: str | None) -> dict[str, Any]:
    """Block Kit (https://api.slack.com/block-kit): header, summary, fields, fix, evidence."""
    m = fmt.mrkdwn
    ct = cause_text(f.cause)
    fields = [
        f"*User*\n{m(f.user_name or '?')}",
        f"*Account*\n{m(f.account or '?')}",
        f"*Partition*\n{m(f.partition or '?')}",
        f"*GPUs*\n{f.gpus if f.gpus is not None else '?'} at {fmt.percent(f.mean_util_ratio)} mean util",
        f"*Wasted*\n{fmt.number(f.gpu_hours_wasted)} of {fmt.number(f.gpu_hours)} GPU-hours",
        f"*Window*\n{fmt.duration(f.duration_s)} to {fmt.when(f.window_end)}",
    ]
    evidence = " · ".join(m(sentence) for sentence in evidence_sentences(f.evidence))
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {
                "type": "plain_text",
                "text": fmt.clip(f"{ct.emoji} {ct.title}: job {f.job_id}", 150),
                "emoji": True,
            },
        },
        *(
            [{"type": "context", "elements": [{"type": "mrkdwn", "text": fmt.clip(m(f.follows), 3000)}]}]
            if f.follows
            else []
        ),
        {"type": "section", "text": {"type": "mrkdwn", "text": fmt.clip(m(f.summary), 3000)}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": fmt.clip(x, 2000)} for x in fields]},
        {"type": "section", "text": {"type": "mrkdwn", "text": fmt.clip(f"*Fix:* {m(fix(f))}", 3000)}},
    ]
    if evidence:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": fmt.clip(evidence, 3000)}]})
    if link:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {"type": "button", "text": {"type": "plain_text", "text": "Job page"}, "url": link}
                ],
            }
        )
    return {"text": f"{ct.title}: job {f.job_id} ({f.user_name or '?'}) - {f.summary}", "blocks": blocks}
