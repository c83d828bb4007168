"""The daily admin digest (Slack and email), the weekly per-user digest and the weekly
per-account summary for account owners (email, and a Slack direct message of the same data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuwatch.alerts.templates import format as fmt
from gpuwatch.alerts.templates.causes import cause_text
from gpuwatch.views import ReportRow


@dataclass(frozen=True)
class Ranked:
    name: str
    gpu_hours_wasted: float
    jobs: int


@dataclass(frozen=True)
class AdminDigest:
    period_start: datetime
    period_end: datetime
    gpu_hours_wasted: float
    jobs: int
    by_user: list[Ranked] = field(default_factory=list)
    by_account: list[Ranked] = field(default_factory=list)
    by_cause: list[Ranked] = field(default_factory=list)
    #: the GPUs that faulted in the period, by node
    faults: list[Fault] = field(default_factory=list)


@dataclass(frozen=True)
class Fault:
    """A GPU that faulted: its node, its index, what happened (``views/faults.fault_text``)."""

    node: str
    gpu_index: int
    text: str


@dataclass(frozen=True)
class UserJobLine:
    job_id: str
    job_name: str | None
    cause: str
    gpu_hours_wasted: float
    fix: str


@dataclass(frozen=True)
class UserDigest:
    user_name: str
    period_start: datetime
    period_end: datetime
    gpu_hours_wasted: float
    jobs: list[UserJobLine] = field(default_factory=list)
    #: the user's ``gpuwatch report`` row for the week (efficiency, energy, trend)
    usage: ReportRow | None = None


@dataclass(frozen=True)
class AccountDigest:
    """One Slurm account's week, for its owners: its report row and its users by waste."""

    account: str
    period_start: datetime
    period_end: datetime
    usage: ReportRow
    users: list[Ranked] = field(default_factory=list)


def usage_sentences(row: ReportRow, whose: str) -> list[str]:
    """A week's report row in words: held and wasted (with the week before), efficiency, energy."""
    share = f" ({fmt.percent(row.wasted_share)})" if row.wasted_share is not None else ""
    before = row.wasted_share_week_before
    trend = "" if before is None else f"; the week before, {fmt.percent(before)} was wasted"
    out = [
        f"{whose} held {fmt.number(row.gpu_hours)} GPU-hours; {fmt.number(row.gpu_hours_wasted)}{share} "
        f"were wasted{trend}."
    ]
    measured = [
        f"GPU utilization {fmt.percent(row.gpu_efficiency)}" if row.gpu_efficiency is not None else "",
        f"CPU {fmt.percent(row.cpu_efficiency)} of the cores requested"
        if row.cpu_efficiency is not None
        else "",
        f"memory peak {fmt.percent(row.memory_efficiency)} of the request"
        if row.memory_efficiency is not None
        else "",
        f"GPU energy {fmt.number(row.energy_kwh)} kWh" if row.energy_kwh > 0 else "",
    ]
    if any(measured):
        out.append("Measured: " + ", ".join(m for m in measured if m) + ".")
    return out


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def advice_sentences(row: ReportRow) -> list[str]:
    """The week's right-sizing advice and estimated saving in words, from the figures
    ``gpuwatch report`` shows: its jobs that ran wholly within the week, each advised as
    ``gpuwatch job ID`` advises it (fewer GPUs, a smaller card or MIG slice) and each verdict's
    estimated saving, summed. Nothing where nothing was advised or estimated."""
    out = []
    parts = []
    if row.jobs_advised_gpus:
        parts.append(
            f"{_jobs(row.jobs_advised_gpus)} could have requested fewer GPUs "
            "(some of the GPUs stayed idle the whole run)"
        )
    if row.jobs_advised_gpu_size:
        parts.append(
            f"{_jobs(row.jobs_advised_gpu_size)} a smaller GPU or MIG slice "
            "(the GPU memory peak and activity would fit one)"
        )
    if parts:
        out.append(
            "Next time: of the jobs that ran wholly within the week, "
            + " and ".join(parts)
            + "; gpuwatch job ID says what to request."
        )
    saving = row.saving_gpu_hours
    if saving is not None and round(saving, 1) > 0:
        out.append(
            f"Estimated saving: about {fmt.number(saving)} GPU-hours had the causes found been fixed. "
            "An estimate: the sum, over the jobs that ran wholly within the week, of each one's "
            "estimate from its verdict (idle GPUs: their GPU-hours; CPU only: all; input-bound: the "
            "GPUs' idle share; no mixed precision: half, assumed); gpuwatch job ID shows each job's basis."
        )
    return out


def _period(d: AdminDigest | UserDigest | AccountDigest) -> str:
    return f"{fmt.when(d.period_start)} to {fmt.when(d.period_end)}"


def admin_subject(d: AdminDigest) -> str:
    faulted = f", {len(d.faults)} GPU(s) faulted" if d.faults else ""
    return (
        f"[gpuwatch] Daily digest {d.period_end:%Y-%m-%d}: {fmt.number(d.gpu_hours_wasted)} GPU-hours wasted "
        f"in {d.jobs} job(s){faulted}"
    )


FAULTS_TITLE = "GPUs that faulted (drain, reset or service: gpuwatch nodes --faulty)"

#: fault lines a digest lists; a night with more (a rack's power event) ends the list with a count,
#: so the mail stays readable and the subject and ``gpuwatch nodes --faulty`` still give them all
FAULT_LINES = 20


def _fault_lines(faults: list[Fault]) -> tuple[list[Fault], str | None]:
    """The faults a digest lists, and the line that counts the rest (None: all are listed)."""
    if len(faults) <= FAULT_LINES:
        return faults, None
    rest = len(faults) - FAULT_LINES
    return faults[:FAULT_LINES], f"... and {rest} more: gpuwatch nodes --faulty lists them all"


def _faults_text(faults: list[Fault]) -> list[str]:
    if not faults:
        return []
    shown, more = _fault_lines(faults)
    lines = [f"  {f.node} gpu{f.gpu_index}: {f.text}" for f in shown]
    return [FAULTS_TITLE, *lines, *([f"  {more}"] if more else []), ""]


def _faults_html(faults: list[Fault]) -> str:
    if not faults:
        return ""
    h = fmt.h
    shown, more = _fault_lines(faults)
    items = "".join(f"<li>{h(f.node)} gpu{f.gpu_index}: {h(f.text)}</li>" for f in shown)
    tail = f"<p>{h(more)}</p>" if more else ""
    return f"<h3>{h(FAULTS_TITLE)}</h3><ul>{items}</ul>{tail}"


def _faults_mrkdwn(faults: list[Fault]) -> str:
    shown, more = _fault_lines(faults)
    lines = [f"• {fmt.mrkdwn(f.node)} gpu{f.gpu_index}: {fmt.mrkdwn(f.text)}" for f in shown]
    return "\n".join([*lines, *([fmt.mrkdwn(more)] if more else [])])


def _ranked_text(title: str, rows: list[Ranked]) -> list[str]:
    if not rows:
        return []
    return [
        title,
        *(f"  {r.name:<24} {fmt.number(r.gpu_hours_wasted):>10} GPU-h  {r.jobs:>4} job(s)" for r in rows),
        "",
    ]


def _ranked_html(title: str, rows: list[Ranked]) -> str:
    if not rows:
        return ""
    h = fmt.h
    body = "".join(
        f'<tr><td>{h(r.name)}</td><td align="right">{fmt.number(r.gpu_hours_wasted)}</td>'
        f'<td align="right">{r.jobs}</td></tr>'
        for r in rows
    )
    return (
        f'<h3>{h(title)}</h3><table cellpadding="3"><tr><th align="left">name</th><th>GPU-hours wasted</th>'
        f"<th>jobs</th></tr>{body}</table>"
    )


def admin_email(d: AdminDigest, link: str | None = None) -> dict[str, str]:
    lines = [
        f"GPU waste, {_period(d)}: {fmt.number(d.gpu_hours_wasted)} GPU-hours in {d.jobs} job(s).",
        "",
        *_ranked_text("Top users", d.by_user),
        *_ranked_text("Top accounts", d.by_account),
        *_ranked_text(
            "By cause", [Ranked(cause_text(r.name).title, r.gpu_hours_wasted, r.jobs) for r in d.by_cause]
        ),
        *_faults_text(d.faults),
        "-- ",
        "gpuwatch daily digest. Sent to the GPU administrators.",
    ]
    h = fmt.h
    html_doc = "\n".join(
        [
            "<!DOCTYPE html>",
            '<html><body style="font-family:sans-serif;max-width:680px">',
            f"<p>GPU waste, {h(_period(d))}: <b>{fmt.number(d.gpu_hours_wasted)} GPU-hours</b> "
            f"in {d.jobs} job(s).</p>",
            _ranked_html("Top users", d.by_user),
            _ranked_html("Top accounts", d.by_account),
            _ranked_html(
                "By cause", [Ranked(cause_text(r.name).title, r.gpu_hours_wasted, r.jobs) for r in d.by_cause]
            ),
            _faults_html(d.faults),
            '<p style="color:#666;font-size:small">'
            "gpuwatch daily digest. Sent to the GPU administrators.</p>",
            "</body></html>",
        ]
    )
    return {"text": "\n".join(lines) + "\n", "html": html_doc + "\n"}


def _ranked_mrkdwn(rows: list[Ranked]) -> str:
    return (
        "\n".join(
            f"{i}. {fmt.mrkdwn(r.name)}: {fmt.number(r.gpu_hours_wasted)} GPU-h ({r.jobs} job(s))"
            for i, r in enumerate(rows, 1)
        )
        or "-"
    )


def admin_slack(d: AdminDigest) -> dict[str, Any]:
    causes = [Ranked(cause_text(r.name).title, r.gpu_hours_wasted, r.jobs) for r in d.by_cause]
    return {
        "text": admin_subject(d),
        "blocks": [
            {
                "type": "header",
                "text": {"type": "plain_text", "text": f"GPU waste digest {d.period_end:%Y-%m-%d}"},
            },
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"*{fmt.number(d.gpu_hours_wasted)} GPU-hours* wasted in {d.jobs} job(s), "
                    f"{_period(d)}",
                },
            },
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": fmt.clip("*Top users*\n" + _ranked_mrkdwn(d.by_user), 2000)},
                    {
                        "type": "mrkdwn",
                        "text": fmt.clip("*Top accounts*\n" + _ranked_mrkdwn(d.by_account), 2000),
                    },
                ],
            },
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": fmt.clip("*By cause*\n" + _ranked_mrkdwn(causes), 3000)},
            },
            *(
                [
                    {
                        "type": "section",
                        "text": {
                            "type": "mrkdwn",
                            "text": fmt.clip(f"*{FAULTS_TITLE}*\n" + _faults_mrkdwn(d.faults), 3000),
                        },
                    }
                ]
                if d.faults
                else []
            ),
        ],
    }


def user_subject(d: UserDigest) -> str:
    return f"[gpuwatch] Your GPU jobs this week: {fmt.number(d.gpu_hours_wasted)} GPU-hours wasted"


def user_email(d: UserDigest, job_link: Any = None) -> dict[str, str]:
    """``job_link(job_id) -> str | None`` adds links to job pages."""
    link = job_link or (lambda _job_id: None)
    lines = [
        f"Hello {d.user_name},",
        "",
        f"between {_period(d)} your GPU jobs left {fmt.number(d.gpu_hours_wasted)} GPU-hours unused.",
        *(usage_sentences(d.usage, "Your jobs") if d.usage else []),
        *(advice_sentences(d.usage) if d.usage else []),
        "",
    ]
    for j in d.jobs:
        label = f'{j.job_id} "{j.job_name}"' if j.job_name else j.job_id
        lines += [
            f"* Job {label}: {cause_text(j.cause).title}, {fmt.number(j.gpu_hours_wasted)} GPU-hours wasted"
        ]
        lines += [f"  Fix: {j.fix}"]
        if link(j.job_id):
            lines += [f"  {link(j.job_id)}"]
    lines += ["", "-- ", "gpuwatch weekly digest. You get this because you ran GPU jobs this week."]
    h = fmt.h
    items = "".join(
        f"<li><b>Job {h(j.job_id)}</b>{' ' + h(repr(j.job_name).strip(chr(39))) if j.job_name else ''}: "
        f"{h(cause_text(j.cause).title)}, {fmt.number(j.gpu_hours_wasted)} GPU-hours wasted<br>"
        f"<i>Fix:</i> {h(j.fix)}"
        + (f' <a href="{h(link(j.job_id))}">job page</a>' if link(j.job_id) else "")
        + "</li>"
        for j in d.jobs
    )
    html_doc = "\n".join(
        [
            "<!DOCTYPE html>",
            '<html><body style="font-family:sans-serif;max-width:680px">',
            f"<p>Hello {h(d.user_name)},</p>",
            f"<p>between {h(_period(d))} your GPU jobs left "
            f"<b>{fmt.number(d.gpu_hours_wasted)} GPU-hours</b> unused.</p>",
            *(f"<p>{h(s)}</p>" for s in (usage_sentences(d.usage, "Your jobs") if d.usage else [])),
            *(f"<p>{h(s)}</p>" for s in (advice_sentences(d.usage) if d.usage else [])),
            f"<ul>{items}</ul>",
            '<p style="color:#666;font-size:small">gpuwatch weekly digest. '
            "You get this because you ran GPU jobs this week.</p>",
            "</body></html>",
        ]
    )
    return {"text": "\n".join(lines) + "\n", "html": html_doc + "\n"}


#: jobs listed in a Slack DM digest: a DM is read at a glance; the email lists up to 20
SLACK_JOBS = 5


def _usage_fields(row: ReportRow | None, wasted: float) -> list[dict[str, str]]:
    """The week's figures as Block Kit fields: held, wasted (and its share), GPU utilization,
    the week before; only what was measured."""
    if row is None:
        return [{"type": "mrkdwn", "text": f"*Wasted*\n{fmt.number(wasted)} GPU-hours"}]
    share = f" ({fmt.percent(row.wasted_share)})" if row.wasted_share is not None else ""
    out = [
        {"type": "mrkdwn", "text": f"*GPU-hours*\n{fmt.number(row.gpu_hours)}"},
        {"type": "mrkdwn", "text": f"*Wasted*\n{fmt.number(row.gpu_hours_wasted)}{share}"},
    ]
    if row.gpu_efficiency is not None:
        out.append({"type": "mrkdwn", "text": f"*GPU utilization*\n{fmt.percent(row.gpu_efficiency)}"})
    if row.wasted_share_week_before is not None:
        out.append(
            {"type": "mrkdwn", "text": f"*Week before*\n{fmt.percent(row.wasted_share_week_before)} wasted"}
        )
    return out


def _advice_blocks(row: ReportRow | None) -> list[dict[str, Any]]:
    """:func:`advice_sentences` as one Block Kit section; none where nothing was advised."""
    sentences = advice_sentences(row) if row is not None else []
    if not sentences:
        return []
    text = fmt.clip("\n".join(fmt.mrkdwn(s) for s in sentences), 3000)
    return [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]


def _job_mrkdwn(j: UserJobLine, url: str | None) -> str:
    label = f"*Job {fmt.mrkdwn(j.job_id)}*" + (f' "{fmt.mrkdwn(j.job_name)}"' if j.job_name else "")
    cause = fmt.mrkdwn(cause_text(j.cause).title)
    lines = [
        f"{label}: {cause}, {fmt.number(j.gpu_hours_wasted)} GPU-hours wasted",
        f"*Fix:* {fmt.mrkdwn(j.fix)}",
    ]
    if url:
        lines.append(f"<{url}|job page>")
    return fmt.clip("\n".join(lines), 3000)


def user_slack(d: UserDigest, job_link: Any = None) -> dict[str, Any]:
    """The weekly user digest as a Slack DM: the week's figures, the top jobs with cause and
    fix (and a link to each job's page when ``job_link(job_id)`` gives one)."""
    link = job_link or (lambda _job_id: None)
    more = len(d.jobs) - SLACK_JOBS
    return {
        "text": user_subject(d),
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": "Your GPU jobs this week"}},
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"Between {_period(d)} your GPU jobs left "
                    f"*{fmt.number(d.gpu_hours_wasted)} GPU-hours* unused.",
                },
                "fields": _usage_fields(d.usage, d.gpu_hours_wasted),
            },
            *_advice_blocks(d.usage),
            {"type": "divider"},
            *(
                {"type": "section", "text": {"type": "mrkdwn", "text": _job_mrkdwn(j, link(j.job_id))}}
                for j in d.jobs[:SLACK_JOBS]
            ),
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": (f"{more} more job(s) not shown. " if more > 0 else "")
                        + "gpuwatch weekly digest. You get this because you ran GPU jobs this week.",
                    }
                ],
            },
        ],
    }


def account_subject(d: AccountDigest) -> str:
    return (
        f"[gpuwatch] Account {d.account} this week: {fmt.number(d.usage.gpu_hours_wasted)} of "
        f"{fmt.number(d.usage.gpu_hours)} GPU-hours wasted"
    )


def account_email(d: AccountDigest) -> dict[str, str]:
    """The account's week for its owners: its figures and its users by wasted GPU-hours."""
    sentences = usage_sentences(d.usage, f"Jobs of {d.account}") + advice_sentences(d.usage)
    lines = [
        f"GPU use of account {d.account}, {_period(d)}.",
        *sentences,
        "",
        *_ranked_text("Users by GPU-hours wasted", d.users),
        "-- ",
        "gpuwatch weekly account summary. You get this as an owner of the account (alerts.account_owners).",
    ]
    h = fmt.h
    html_doc = "\n".join(
        [
            "<!DOCTYPE html>",
            '<html><body style="font-family:sans-serif;max-width:680px">',
            f"<p>GPU use of account <b>{h(d.account)}</b>, {h(_period(d))}.</p>",
            *(f"<p>{h(s)}</p>" for s in sentences),
            _ranked_html("Users by GPU-hours wasted", d.users),
            '<p style="color:#666;font-size:small">gpuwatch weekly account summary. '
            "You get this as an owner of the account (alerts.account_owners).</p>",
            "</body></html>",
        ]
    )
    return {"text": "\n".join(lines) + "\n", "html": html_doc + "\n"}


def account_slack(d: AccountDigest) -> dict[str, Any]:
    """The account's week as a Slack DM to an owner: its figures and its users by waste."""
    return {
        "text": account_subject(d),
        "blocks": [
            {
                "type": "header",
                "text": {"type": "plain_text", "text": fmt.clip(f"Account {d.account} this week", 150)},
            },
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": fmt.clip(f"GPU use of account *{fmt.mrkdwn(d.account)}*, {_period(d)}.", 3000),
                },
                "fields": _usage_fields(d.usage, d.usage.gpu_hours_wasted),
            },
            *_advice_blocks(d.usage),
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": fmt.clip("*Users by GPU-hours wasted*\n" + _ranked_mrkdwn(d.users), 3000),
                },
            },
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": "gpuwatch weekly account summary. You get this as an owner of the account "
                        "(alerts.account_owners).",
                    }
                ],
            },
        ],
    }
