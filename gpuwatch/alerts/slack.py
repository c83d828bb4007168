"""Slack through an incoming webhook: one POST of Block Kit JSON per notice.

Answers (https://api.slack.com/messaging/webhooks#handling_errors): 200 ``ok`` is delivered;
429 carries ``Retry-After`` (seconds), honoured by pausing the channel that long; 5xx and
connection failures are retried with back-off; other 4xx (``invalid_payload``, 403
``action_prohibited``, 404 ``no_service`` for a revoked webhook) are permanent. A webhook has
no idempotency key, so a POST whose answer was lost (read timeout, reset) is *in doubt*.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import requests

from gpuwatch.alerts.base import Channel, ChannelError, Delivery, Message
from gpuwatch.config.alerts import SlackConfig

log = logging.getLogger(__name__)


def retry_after(value: str | None) -> float | None:
    """Seconds of a ``Retry-After`` header (the Web API's too); None when absent or a date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP-date: Slack sends seconds; fall back to back-off


def post(
    session: Any, url: str, what: str, *, timeout: float, may_deliver: bool = True, **body: Any
) -> requests.Response:
    """POST to Slack and return the answer, unless it says to try again: a connection failure
    (in doubt when the request may have reached Slack and ``may_deliver``), 429 (the channel
    pauses ``Retry-After`` seconds) or 5xx (back-off) raise a ChannelError, its text led by
    ``what`` (a Web API method; "" for the webhook)."""
    lead = f"{what}: " if what else ""
    try:
        resp = session.post(url, timeout=timeout, **body)
    except (requests.ConnectionError, requests.Timeout) as exc:
        # a refused or timed-out connect never reached Slack; anything later may have
        connected = not isinstance(exc, requests.ConnectTimeout) and "NewConnectionError" not in repr(exc)
        raise ChannelError(
            f"{what or 'POST'} failed: {type(exc).__name__}: {exc}",
            retry=True,
            in_doubt=may_deliver and connected,
            channel_down=True,
        ) from None
    except requests.RequestException as exc:
        raise ChannelError(
            f"{what or 'POST'} failed: {type(exc).__name__}: {exc}", retry=True, in_doubt=may_deliver
        ) from None
    text = resp.text[:300]
    if resp.status_code == 429:
        raise ChannelError(
            f"{lead}429 rate limited: {text}",
            retry=True,
            code=429,
            retry_after_s=retry_after(resp.headers.get("Retry-After")),
            channel_down=True,
        )
    if resp.status_code >= 500:
        raise ChannelError(
            f"{lead}{resp.status_code}: {text}", retry=True, code=resp.status_code, channel_down=True
        )
    return resp


def credential(resolve: Callable[[], str | None], missing: str) -> str:
    """The webhook URL or bot token ``resolve`` reads from the config. An unreadable file or none
    configured is the whole channel down (retried later, its other notices skipped), not a fault
    of one notice; ``missing`` is the error's text for none."""
    try:
        value = resolve()
    except ValueError as exc:
        raise ChannelError(str(exc), retry=True, channel_down=True) from None
    if not value:
        raise ChannelError(missing, retry=True, channel_down=True)
    return value


class SlackChannel(Channel):
    name = "slack"

    def __init__(self, cfg: SlackConfig, *, session: requests.Session | None = None) -> None:
        self.cfg = cfg
        self._session = session

    def send(self, message: Message, on_handoff: Callable[[], bool]) -> Delivery:
        url = credential(self.cfg.resolve_url, "alerts.slack: no webhook_url configured")
        if not on_handoff():
            raise ChannelError("lease lost before the POST", retry=True)
        resp = post(self._session or requests, url, "", timeout=self.cfg.timeout_s, json=message.payload)
        body = resp.text[:300]
        if resp.status_code == 200:
            return Delivery(200, body or "ok")
        raise ChannelError(f"{resp.status_code}: {body}", retry=False, code=resp.status_code)
