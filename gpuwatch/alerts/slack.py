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


class SlackChannel(Channel):
    name = "slack"

    def __init__(self, cfg: SlackConfig, *, session: requests.Session | None = None) -> None:
        self.cfg = cfg
        self._session = session

    def send(self, message: Message, on_handoff: Callable[[], bool]) -> Delivery:
        try:
            url = self.cfg.resolve_url()
        except ValueError as exc:
            raise ChannelError(str(exc), retry=True, channel_down=True) from None
        if not url:
            raise ChannelError("alerts.slack: no webhook_url configured", retry=True, channel_down=True)
        if not on_handoff():
            raise ChannelError("lease lost before the POST", retry=True)
        session = self._session or requests
        try:
            resp = session.post(url, json=message.payload, timeout=self.cfg.timeout_s)
        except (requests.ConnectionError, requests.Timeout) as exc:
            # a refused or timed-out connect never reached Slack; anything later may have
            connected = not isinstance(exc, requests.ConnectTimeout) and "NewConnectionError" not in repr(exc)
            raise ChannelError(
                f"POST failed: {type(exc).__name__}: {exc}", retry=True, in_doubt=connected, channel_down=True
            ) from None
        except requests.RequestException as exc:
            raise ChannelError(
                f"POST failed: {type(exc).__name__}: {exc}", retry=True, in_doubt=True
            ) from None
        body = resp.text[:300]
        if resp.status_code == 200:
            return Delivery(200, body or "ok")
        if resp.status_code == 429:
            raise ChannelError(
                f"429 rate limited: {body}",
                retry=True,
                code=429,
                retry_after_s=retry_after(resp.headers.get("Retry-After")),
                channel_down=True,
            )
        if resp.status_code >= 500:
            raise ChannelError(
                f"{resp.status_code}: {body}", retry=True, code=resp.status_code, channel_down=True
            )
        raise ChannelError(f"{resp.status_code}: {body}", retry=False, code=resp.status_code)
