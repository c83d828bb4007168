"""``gpuwatch alerts``: list the outbox, test a channel, send (or show what would be sent)."""

from __future__ import annotations

import json
from typing import Any

import click

from gpuwatch.cli.params import LIMIT
from gpuwatch.cli.render import FORMAT_OPTION, OutputFormat, render
from gpuwatch.config.alerts import AlertsConfig

LIST_COLUMNS = [
    ("id", "id"),
    ("created_at", "queued (UTC)"),
    ("kind", "kind"),
    ("channel", "channel"),
    ("recipient", "recipient"),
    ("job_id", "job"),
    ("cause", "cause"),
    ("status", "status"),
    ("attempts", "tries"),
    ("not_before", "next try (UTC)"),
    ("sent_at", "sent (UTC)"),
    ("last_error", "last error"),
]
ATTEMPT_COLUMNS = [
    ("attempt", "try"),
    ("worker", "worker"),
    ("started_at", "started (UTC)"),
    ("finished_at", "finished (UTC)"),
    ("outcome", "outcome"),
    ("status_code", "code"),
    ("detail", "detail"),
]


def _ctx() -> Any:
    return click.get_current_context().find_root().obj


#: the channels notices go through (``[alerts.<channel>]``)
CHANNELS = ("slack", "slack_dm", "email")


def _config() -> AlertsConfig:
    return _ctx().settings.alerts


def _engine() -> Any:
    from gpuwatch.sql import migrate

    engine = _ctx().engine()
    if not migrate.is_up_to_date(engine):
        raise click.ClickException("database schema is not current; run: gpuwatch db upgrade")
    return engine


@click.group("alerts")
def alerts() -> None:
    """Notices to users, account owners and admins (Slack, Slack DM, email)."""


@alerts.command("list")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(["pending", "sending", "sent", "failed", "in_doubt"]),
    help="Only these (repeatable).",
)
@click.option("--limit", type=LIMIT, default=50, show_default=True, help="At most N notices.")
@FORMAT_OPTION
def list_cmd(statuses: tuple[str, ...], limit: int, fmt: str) -> None:
    """The outbox, newest first."""
    from gpuwatch.alerts.outbox import list_rows

    rows = [r.as_json() for r in list_rows(_engine(), statuses=statuses, limit=limit)]
    empty = (
        f"no notice is {' or '.join(statuses)}"
        if statuses
        else "the outbox is empty: no notice queued yet "
        "(gpuwatch alerts send --dry-run shows what the rules would queue)"
    )
    click.echo(render(rows, LIST_COLUMNS, OutputFormat(fmt), title="alert outbox", empty=empty))


@alerts.command("attempts")
@click.argument("outbox_id", type=int)
@FORMAT_OPTION
def attempts_cmd(outbox_id: int, fmt: str) -> None:
    """Every send attempt of one notice and its outcome."""
    from gpuwatch.alerts.outbox import attempts_of

    rows = attempts_of(_engine(), outbox_id)
    empty = f"no send attempt of notice {outbox_id} (gpuwatch alerts list shows the notices)"
    title = f"attempts of notice {outbox_id}"
    click.echo(render(rows, ATTEMPT_COLUMNS, OutputFormat(fmt), title=title, empty=empty))


@alerts.command("retry")
@click.argument("outbox_ids", type=int, nargs=-1, required=True)
def retry_cmd(outbox_ids: tuple[int, ...]) -> None:
    """Put failed or in-doubt notices back in the queue."""
    from gpuwatch.alerts.outbox import requeue
    from gpuwatch.clock import utcnow

    n = requeue(_engine(), outbox_ids, utcnow())
    click.echo(f"{n} notice(s) queued again")


@alerts.command("test")
@click.argument("channel", type=click.Choice(CHANNELS))
@click.option(
    "--to",
    "to",
    help="email, slack_dm: the address (slack_dm: or a Slack user id; default: the first of "
    "alerts.admin_emails).",
)
def test_cmd(channel: str, to: str | None) -> None:
    """Send one test message through CHANNEL now, bypassing the outbox."""
    from gpuwatch.alerts.base import ChannelError, Message
    from gpuwatch.alerts.outbox import dedup_key
    from gpuwatch.alerts.worker import build_channels
    from gpuwatch.clock import utcnow

    cfg = _config()
    ch = build_channels(cfg).get(channel)
    if ch is None:
        raise click.ClickException(f"alerts.{channel} is not configured")
    now = utcnow()
    text = f"gpuwatch test message, {now:%Y-%m-%d %H:%M:%S} UTC: this channel works."
    blocks: dict[str, Any] = {
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": f":white_check_mark: {text}"}}],
    }
    if channel == "slack":
        recipient = cfg.slack.channel_name
        payload = blocks
    else:
        recipient = to or (cfg.admin_emails[0] if cfg.admin_emails else "")
        if not recipient:
            raise click.ClickException("give --to ADDRESS (no alerts.admin_emails configured)")
        payload = blocks if channel == "slack_dm" else {"text": text + "\n", "html": f"<p>{text}</p>\n"}
    message = Message(0, dedup_key("test", now), recipient, "[gpuwatch] test message", payload)
    try:
        delivery = ch.send(message, lambda: True)
    except ChannelError as exc:
        raise click.ClickException(f"{channel}: {exc}") from None
    click.echo(f"{channel}: sent to {recipient} ({delivery.code} {delivery.detail.strip()[:120]})")


def _show(notice: Any) -> str:
    head = f"--- {notice.kind} via {notice.channel} to {notice.recipient}"
    if notice.job_id:
        head += f" (job {notice.job_id}, cause {notice.cause})"
    lines = [head, f"Subject: {notice.subject}"]
    if notice.channel == "email":
        lines.append(notice.payload["text"].rstrip("\n"))
    else:
        lines.append(json.dumps(notice.payload, indent=2))
    return "\n".join(lines)


@alerts.command("send")
@click.option("--dry-run", is_flag=True, help="Print what would be queued and sent; change nothing.")
def send_cmd(dry_run: bool) -> None:
    """Evaluate the rules, queue new notices, send what is due (what the daemon does each interval)."""
    from gpuwatch.alerts.outbox import PENDING, SENDING, list_rows
    from gpuwatch.alerts.service import AlertService
    from gpuwatch.clock import utcnow

    cfg = _config()
    engine = _engine()
    if not any(cfg.channel_configured(channel) for channel in CHANNELS):
        click.echo(
            "no alert channel is configured, so no notice is queued or sent: set [alerts.slack], "
            "[alerts.slack_dm] or [alerts.email] (docs/alerts.md)",
            err=True,
        )
    service = AlertService(engine, cfg)
    if dry_run:
        decisions = service.decide(dry_run=True)
        click.echo(f"would queue {len(decisions.notices)} notice(s)")
        for n in decisions.notices:
            click.echo(_show(n))
        for job_id, who, why in decisions.skipped:
            click.echo(f"skip job {job_id} -> {who}: {why}")
        now = utcnow()
        due = [
            r
            for r in list_rows(engine, statuses=(PENDING, SENDING), limit=1000)
            if (r.status == PENDING and r.not_before <= now) or (r.lease_until and r.lease_until < now)
        ]
        click.echo(f"would send {len(due)} queued notice(s) now")
        for r in sorted(due, key=lambda r: r.id):
            click.echo(f"  #{r.id} {r.channel} to {r.recipient}: {r.subject}")
        return
    decisions, report = service.tick()
    click.echo(
        f"queued {decisions.queued} notice(s), {len(decisions.actions)} enforcement action(s); "
        f"sent {report.sent}, retrying {report.retried}, failed {report.failed}, in doubt {report.in_doubt}"
    )
    for err in report.errors:
        click.echo(f"  {err}", err=True)


def register(cli: click.Group) -> None:
    cli.add_command(alerts)
