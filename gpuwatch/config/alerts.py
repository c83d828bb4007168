"""``[alerts]``: who hears about which verdicts, through which channel, and when.

One frozen, validated model, :class:`gpuwatch.config.Settings` ``.alerts``; the alert code
under :mod:`gpuwatch.alerts` reads it. ``docs/alerts.md`` documents every key with an example.
"""

from __future__ import annotations

from datetime import time
from enum import Enum
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator

from gpuwatch.config.section import Section, secret_of

#: every cause the classifier writes; 'healthy' is never alerted
CAUSES: tuple[str, ...] = (
    "idle_allocation",
    "input_bound",
    "small_work",
    "no_mixed_precision",
    "gpu_memory_pressure",
    "host_memory_pressure",
    "communication_bound",
    "cpu_only",
    "throttled",
    "gpu_fault",
    "unknown_low",
)
HEALTHY = "healthy"


class RecipientKind(str, Enum):
    USER = "user"  # the job's owner, by email
    OWNER = "owner"  # the Slurm account's owner(s), by email (account_owners)
    ADMIN = "admin"  # the admin Slack channel, and admin_emails


class DigestVia(str, Enum):
    """How a weekly digest reaches a person (``digest.weekly_user_via``, ``weekly_account_via``)."""

    EMAIL = "email"  # alerts.email, to the address
    SLACK_DM = "slack_dm"  # alerts.slack_dm, a direct message to the Slack user of that address


class TlsMode(str, Enum):
    NONE = "none"  # plain SMTP (a local relay)
    STARTTLS = "starttls"  # plain connect, then STARTTLS (port 587)
    SSL = "ssl"  # TLS from the first byte (port 465)


class InDoubtPolicy(str, Enum):
    """What to do with a notice whose worker died after handing it to the channel but before
    recording the outcome: it may or may not have been delivered."""

    RESEND = "resend"  # at-least-once: send again (email: same Message-ID, so clients dedupe)
    HOLD = "hold"  # at-most-once: park it as 'in_doubt' for `gpuwatch alerts retry`


class EnforceMode(str, Enum):
    OFF = "off"
    DRY_RUN = "dry_run"  # record and log what would be done; warn nobody, cancel nothing
    ON = "on"


def _zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {value!r} (an IANA name such as 'America/New_York')") from None
    return value


class AlertRule(Section):
    """Verdicts of these causes, past these thresholds, notify these recipients.

    A verdict takes the first rule whose ``causes`` list its cause (``"*"``: any cause).
    """

    causes: list[str] = Field(default_factory=lambda: ["*"])
    notify: list[RecipientKind] = Field(default_factory=lambda: [RecipientKind.USER, RecipientKind.ADMIN])
    min_gpu_hours_wasted: float = Field(0.25, ge=0)
    min_duration_s: float = Field(
        300.0,
        ge=0,
        description="Window length (window_end - window_start); the recent window is "
        "classify.recent_window_s (600 s) long.",
    )
    min_confidence: float = Field(0.5, ge=0, le=1)

    @field_validator("causes")
    @classmethod
    def _causes(cls, value: list[str]) -> list[str]:
        unknown = [c for c in value if c != "*" and c not in CAUSES]
        if unknown:
            raise ValueError(f"unknown cause(s) {unknown}; known: {', '.join(CAUSES)} or '*'")
        return value

    def matches(self, cause: str) -> bool:
        return "*" in self.causes or cause in self.causes


def default_rules() -> list[AlertRule]:
    """The rules when ``[[alerts.rules]]`` is not set: GPUs doing nothing at all are told within
    minutes (one idle GPU of four for ten minutes wastes 0.17 GPU-h); any other named cause
    once it has wasted a quarter GPU-hour; "low, cause unknown" only after half an hour and a
    GPU-hour, as it asks the user to investigate."""
    return [
        AlertRule(causes=["idle_allocation", "cpu_only"], min_gpu_hours_wasted=0.1, min_confidence=0.7),
        AlertRule(causes=["unknown_low"], min_gpu_hours_wasted=1.0, min_duration_s=1800.0),
        AlertRule(causes=["*"]),
    ]


class QuietHours(Section):
    """No notices to these recipients between ``start`` and ``end`` (local time in
    ``timezone``); they wait in the outbox and go out when quiet hours end."""

    start: time = time(22, 0)
    end: time = time(7, 0)
    timezone: str = "UTC"
    applies_to: list[RecipientKind] = Field(default_factory=lambda: [RecipientKind.USER, RecipientKind.OWNER])

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        return _zone(value)


class SlackConfig(Section):
    """An incoming webhook (https://api.slack.com/messaging/webhooks) for the admin channel."""

    webhook_url: SecretStr | None = None
    webhook_url_file: Path | None = Field(None, description="First line is the webhook URL.")
    channel_name: str = Field(
        "#gpu-admins", description="Shown in the outbox; the webhook picks the channel."
    )
    timeout_s: float = Field(10.0, gt=0, le=120)
    in_doubt: InDoubtPolicy = InDoubtPolicy.RESEND

    def resolve_url(self) -> str | None:
        if self.webhook_url is not None:
            return self.webhook_url.get_secret_value()
        if self.webhook_url_file is not None:
            try:
                return self.webhook_url_file.read_text().strip().splitlines()[0] or None
            except (OSError, IndexError) as exc:
                raise ValueError(
                    f"alerts.slack.webhook_url_file: cannot read {self.webhook_url_file}: {exc}"
                ) from None
        return None

    @property
    def configured(self) -> bool:
        return self.webhook_url is not None or self.webhook_url_file is not None


class SlackDmConfig(Section):
    """A Slack app's bot token for direct messages through the Web API
    (``users.lookupByEmail``, then ``chat.postMessage`` to the user's id); the token needs the
    scopes ``users:read.email`` and ``chat:write``."""

    bot_token: SecretStr | None = Field(None, description="xoxb-...; unset (and no file): no Slack DM.")
    bot_token_file: Path | None = Field(None, description="First line is the bot token.")
    api_url: str = Field("https://slack.com/api", description="Base of the Web API methods.")
    timeout_s: float = Field(10.0, gt=0, le=120)
    in_doubt: InDoubtPolicy = InDoubtPolicy.RESEND

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError(f"must be an http(s) URL, e.g. 'https://slack.com/api', not {value!r}")
        return value.rstrip("/")

    def resolve_token(self) -> str | None:
        try:
            token = secret_of(
                self.bot_token.get_secret_value() if self.bot_token is not None else None,
                self.bot_token_file,
            )
        except OSError as exc:
            raise ValueError(
                f"alerts.slack_dm.bot_token_file: cannot read {self.bot_token_file}: {exc}"
            ) from None
        return token.splitlines()[0].strip() if token else None

    @property
    def configured(self) -> bool:
        return self.bot_token is not None or self.bot_token_file is not None


class EmailConfig(Section):
    """SMTP submission: a local relay by default; STARTTLS or TLS and login when set."""

    host: str | None = Field(None, description="SMTP server; unset: email is off.")
    port: int = Field(25, ge=1, lt=65536)
    tls: TlsMode = TlsMode.NONE
    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    from_address: str = "gpuwatch@localhost"
    reply_to: str | None = None
    message_id_domain: str | None = Field(None, description="Default: the domain of from_address.")
    timeout_s: float = Field(30.0, gt=0, le=300)
    in_doubt: InDoubtPolicy = InDoubtPolicy.RESEND

    @property
    def configured(self) -> bool:
        return self.host is not None

    def resolve_password(self) -> str | None:
        if self.password is not None:
            return self.password.get_secret_value()
        if self.password_file is not None:
            try:
                return self.password_file.read_text().strip() or None
            except OSError as exc:
                raise ValueError(
                    f"alerts.email.password_file: cannot read {self.password_file}: {exc}"
                ) from None
        return None

    @property
    def domain(self) -> str:
        return self.message_id_domain or self.from_address.rpartition("@")[2] or "gpuwatch.invalid"


class DigestConfig(Section):
    """A daily digest for admins, a weekly one per user and per account (to its owners), each
    sent once per period."""

    daily_admin: bool = True
    daily_at: time = time(8, 0)
    weekly_user: bool = True
    weekly_weekday: int = Field(0, ge=0, le=6, description="0 = Monday.")
    weekly_at: time = time(9, 0)
    timezone: str = "UTC"
    top_n: int = Field(10, ge=1, le=100)
    min_user_gpu_hours_wasted: float = Field(1.0, ge=0, description="Weekly digest only above this.")
    weekly_user_opt_out: list[str] = Field(
        default_factory=list, description="Slurm user names that get no weekly digest."
    )
    weekly_user_via: list[DigestVia] = Field(
        default_factory=lambda: [DigestVia.EMAIL],
        description="How users get it: 'email' and/or 'slack_dm' (opt-outs apply to each).",
    )
    weekly_account: bool = Field(
        True, description="A weekly summary per Slurm account to its owners (account_owners)."
    )
    weekly_account_via: list[DigestVia] = Field(
        default_factory=lambda: [DigestVia.EMAIL], description="How owners get it: 'email' and/or 'slack_dm'."
    )
    min_account_gpu_hours_wasted: float = Field(
        1.0, ge=0, description="Weekly account summary only above this."
    )

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        return _zone(value)

    @field_validator("weekly_user_via", "weekly_account_via")
    @classmethod
    def _via(cls, value: list[DigestVia]) -> list[DigestVia]:
        if not value:
            raise ValueError(
                "name at least one of 'email', 'slack_dm' (weekly_user or weekly_account = false "
                "turns that digest off)"
            )
        return list(dict.fromkeys(value))  # each way once, in the order given


class WorkerConfig(Section):
    """The outbox worker: lease, retries, back-off."""

    interval_s: float = Field(15.0, ge=1)
    batch: int = Field(50, ge=1, le=1000)
    lease_s: float = Field(120.0, gt=0, description="Longer than any one send can take.")
    backoff_initial_s: float = Field(30.0, gt=0)
    backoff_max_s: float = Field(3600.0, gt=0)
    give_up_after_s: float = Field(3 * 86400.0, gt=0, description="Then 'failed' (kept, retryable).")


class EnforcementConfig(Section):
    """Optional: warn, then ``scancel``, jobs whose GPUs all stay at 0%. Off by default."""

    mode: EnforceMode = EnforceMode.OFF
    warn_after_s: float = Field(3600.0, gt=0, description="Idle this long: warn the user.")
    cancel_after_s: float = Field(7200.0, gt=0, description="Idle this long: cancel ...")
    min_warning_s: float = Field(1800.0, ge=0, description="... and at least this long after the warning.")
    idle_util_max_ratio: float = Field(0.0, ge=0, le=0.05, description="Mean GPU util counted as 0%.")
    allow_users: list[str] = Field(default_factory=list)
    allow_accounts: list[str] = Field(default_factory=list)
    allow_partitions: list[str] = Field(default_factory=list)
    command_prefix: list[str] = Field(default_factory=list, description="e.g. ['ssh', 'login1'] or sudo.")
    scancel: str = "scancel"
    command_timeout_s: float = Field(30.0, gt=0)

    @model_validator(mode="after")
    def _order(self) -> EnforcementConfig:
        if self.cancel_after_s <= self.warn_after_s:
            raise ValueError("cancel_after_s must be greater than warn_after_s")
        return self


#: the placeholder each template setting must hold, with an example
_TEMPLATES: dict[str, tuple[str, str]] = {
    "user_email_pattern": ("{user}", "{user}@example.edu"),
    "job_url": ("{job_id}", "https://gpuwatch.example.edu/jobs/{job_id}"),
}


class AlertsConfig(Section):
    """Everything about notices; see docs/alerts.md."""

    enabled: bool = Field(False, description="Evaluate rules and send from inside the daemon.")
    rules: list[AlertRule] = Field(default_factory=default_rules)
    lookback_s: float = Field(6 * 3600.0, gt=0, description="Verdicts evaluated this recently are read.")
    user_email_pattern: str | None = Field(None, description="e.g. '{user}@example.edu'.")
    user_email_command: list[str] = Field(
        default_factory=list, description="argv printing the address, '{user}' substituted; wins."
    )
    account_owners: dict[str, list[str]] = Field(default_factory=dict, description="account -> addresses")
    admin_emails: list[str] = Field(default_factory=list)
    job_url: str | None = Field(None, description="e.g. 'https://gpuwatch.example.edu/jobs/{job_id}'.")
    user_cooldown_s: float = Field(6 * 3600.0, ge=0, description="At most one notice per person per this.")
    job_cooldown_s: float = Field(
        24 * 3600.0,
        ge=0,
        description="Per job, cause and recipient; a cause replacing 'unknown_low', or one "
        "escalation, goes at once.",
    )
    quiet_hours: QuietHours | None = None
    slack: SlackConfig = Field(default_factory=SlackConfig)
    slack_dm: SlackDmConfig = Field(default_factory=SlackDmConfig)
    email: EmailConfig = Field(default_factory=EmailConfig)
    digest: DigestConfig = Field(default_factory=DigestConfig)
    worker: WorkerConfig = Field(default_factory=WorkerConfig)
    enforcement: EnforcementConfig = Field(default_factory=EnforcementConfig)
    leader_lock_key: int = Field(0x67707577_616C7274 & 0x7FFFFFFFFFFFFFFF, description="pg advisory key.")

    @field_validator("account_owners", mode="before")
    @classmethod
    def _owners(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: [v] if isinstance(v, str) else v for k, v in value.items()}
        return value

    @field_validator(*_TEMPLATES)
    @classmethod
    def _template(cls, value: str | None, info: ValidationInfo) -> str | None:
        placeholder, example = _TEMPLATES[info.field_name]
        if value is not None and placeholder not in value:
            raise ValueError(f"must contain {placeholder}, e.g. {example!r}")
        return value

    @model_validator(mode="after")
    def _lease(self) -> AlertsConfig:
        # a send is a few socket operations, each bounded by its timeout; a lease shorter than
        # one of them would let a second worker take a notice that is still being sent. A
        # Slack DM is two requests (the user's id, then the message)
        timeouts = [c.timeout_s for c in (self.slack, self.email) if c.configured]
        if self.slack_dm.configured:
            timeouts.append(2 * self.slack_dm.timeout_s)
        longest = max(timeouts, default=0.0)
        if self.worker.lease_s <= longest:
            raise ValueError(f"worker.lease_s must exceed the channel timeouts ({longest:g} s)")
        return self

    @model_validator(mode="after")
    def _digest_via(self) -> AlertsConfig:
        for key in ("weekly_user_via", "weekly_account_via"):
            if DigestVia.SLACK_DM in getattr(self.digest, key) and not self.slack_dm.configured:
                raise ValueError(
                    f"digest.{key} names 'slack_dm' but [alerts.slack_dm] has no bot_token or bot_token_file"
                )
        return self

    def channel_configured(self, channel: str) -> bool:
        """Whether the channel of that name (``slack``, ``slack_dm``, ``email``) has its settings."""
        section = {"slack": self.slack, "slack_dm": self.slack_dm, "email": self.email}.get(channel)
        return section is not None and section.configured

    def in_doubt(self, channel: str) -> InDoubtPolicy:
        """The in-doubt policy of the channel of that name."""
        section = {"slack": self.slack, "slack_dm": self.slack_dm}.get(channel, self.email)
        return section.in_doubt

    def job_link(self, job_id: str | None) -> str | None:
        if self.job_url is None or not job_id:
            return None
        return self.job_url.replace("{job_id}", job_id)
