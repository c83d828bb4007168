"""Email over SMTP (``smtplib``): multipart text + HTML, one recipient per notice.

The conversation is split so the worker can record the handoff at the right moment:
``EHLO``, optional ``STARTTLS`` and ``AUTH``, ``MAIL FROM``, ``RCPT TO`` may all fail without
anything delivered; the message may be delivered from ``DATA`` on (RFC 5321 §4.1.1.4: the
server takes responsibility with its 250 after the final dot), so ``on_handoff`` is called
just before ``DATA``. The ``Message-ID`` is derived from the outbox id and dedup key
(:func:`message_id`): a resend after a crash carries the same id, which mail stores and
clients that dedupe by Message-ID (Gmail, ``formail -D``, many MUAs) show once.

Reply codes: 4xx is transient (retry), 5xx permanent (``failed``); a connection that cannot
be opened means the server is down (retry, and skip the channel for this round).
"""

from __future__ import annotations

import hashlib
import logging
import smtplib
import ssl
from collections.abc import Callable
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from email.utils import formatdate

from gpuwatch.alerts.base import Channel, ChannelError, Delivery, Message
from gpuwatch.config.alerts import EmailConfig, TlsMode

log = logging.getLogger(__name__)


def message_id(outbox_id: int, dedup_key: str, domain: str) -> str:
    """Stable per notice: the same row always gets the same id, and two databases (or a reset
    one reusing ids) never give two different notices the same id."""
    tag = hashlib.sha256(f"{outbox_id}:{dedup_key}".encode()).hexdigest()[:16]
    return f"<gpuwatch.{outbox_id}.{tag}@{domain}>"


def build_message(cfg: EmailConfig, message: Message) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = cfg.from_address
    msg["To"] = message.recipient
    msg["Subject"] = message.subject
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    msg["Message-ID"] = message_id(message.outbox_id, message.dedup_key, cfg.domain)
    if cfg.reply_to:
        msg["Reply-To"] = cfg.reply_to
    msg["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation auto-replies
    msg["X-Gpuwatch-Notice"] = str(message.outbox_id)
    # quoted-printable: long paragraphs and HTML table rows stay under SMTP's 998-octet line limit
    msg.set_content(message.payload["text"], cte="quoted-printable")
    msg.add_alternative(message.payload["html"], subtype="html", cte="quoted-printable")
    return msg


def _smtp_error(stage: str, exc: smtplib.SMTPResponseException, *, in_doubt: bool = False) -> ChannelError:
    text = (
        exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else str(exc.smtp_error)
    )
    return ChannelError(
        f"{stage}: {exc.smtp_code} {text}", retry=exc.smtp_code < 500, code=exc.smtp_code, in_doubt=in_doubt
    )


class EmailChannel(Channel):
    name = "email"

    def __init__(self, cfg: EmailConfig) -> None:
        self.cfg = cfg

    def _connect(self) -> smtplib.SMTP:
        cfg = self.cfg
        assert cfg.host is not None
        try:
            if cfg.tls is TlsMode.SSL:
                smtp: smtplib.SMTP = smtplib.SMTP_SSL(
                    cfg.host, cfg.port, timeout=cfg.timeout_s, context=ssl.create_default_context()
                )
            else:
                smtp = smtplib.SMTP(cfg.host, cfg.port, timeout=cfg.timeout_s)
        except (OSError, smtplib.SMTPException) as exc:
            raise ChannelError(
                f"connect {cfg.host}:{cfg.port}: {type(exc).__name__}: {exc}", retry=True, channel_down=True
            ) from None
        try:
            smtp.ehlo()
            if cfg.tls is TlsMode.STARTTLS:
                smtp.starttls(context=ssl.create_default_context())
                smtp.ehlo()
            password = cfg.resolve_password()
            if cfg.username:
                smtp.login(cfg.username, password or "")
        except smtplib.SMTPAuthenticationError as exc:
            smtp.close()
            raise ChannelError(
                f"login: {exc.smtp_code} {exc.smtp_error!r}", retry=True, channel_down=True
            ) from None
        except smtplib.SMTPResponseException as exc:
            smtp.close()
            raise _smtp_error("session", exc) from None
        except (OSError, smtplib.SMTPException, ValueError) as exc:
            smtp.close()
            raise ChannelError(
                f"session: {type(exc).__name__}: {exc}", retry=True, channel_down=True
            ) from None
        return smtp

    def send(self, message: Message, on_handoff: Callable[[], bool]) -> Delivery:
        msg = build_message(self.cfg, message)
        smtp = self._connect()
        try:
            code, resp = smtp.mail(self.cfg.from_address)
            if code != 250:
                raise _smtp_error("MAIL FROM", smtplib.SMTPSenderRefused(code, resp, self.cfg.from_address))
            code, resp = smtp.rcpt(message.recipient)
            if code not in (250, 251):
                raise _smtp_error(f"RCPT TO {message.recipient}", smtplib.SMTPResponseException(code, resp))
            if not on_handoff():
                raise ChannelError("lease lost before DATA", retry=True)
            try:
                code, resp = smtp.data(msg.as_bytes(policy=SMTP_POLICY))
            except smtplib.SMTPDataError as exc:  # DATA itself refused: nothing delivered
                raise _smtp_error("DATA", exc) from None
            except (OSError, smtplib.SMTPException) as exc:  # the answer was lost
                raise ChannelError(
                    f"DATA: {type(exc).__name__}: {exc}", retry=True, in_doubt=True, channel_down=True
                ) from None
            if code != 250:  # smtplib returns the reply after the final dot without raising
                raise _smtp_error("DATA", smtplib.SMTPDataError(code, resp))
        except ChannelError:
            smtp.close()
            raise
        except (OSError, smtplib.SMTPException) as exc:
            smtp.close()
            raise ChannelError(f"SMTP: {type(exc).__name__}: {exc}", retry=True, channel_down=True) from None
        try:
            smtp.quit()
        except (OSError, smtplib.SMTPException):
            smtp.close()
        return Delivery(code, resp.decode(errors="replace") if isinstance(resp, bytes) else str(resp))
