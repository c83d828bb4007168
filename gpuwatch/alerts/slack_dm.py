"""Slack direct messages through the Web API with a bot token: one DM of Block Kit per notice.

A notice's recipient is an email address (:meth:`RecipientResolver.user_email`, or an account
owner's address). The channel asks ``users.lookupByEmail`` for the Slack user of that address
(scope ``users:read.email``), remembers the id for the life of the channel, then calls
``chat.postMessage`` with ``channel=<user id>`` (scope ``chat:write``): Slack posts it in the
app's DM with that user. A recipient without ``@`` is taken as a Slack id already.

Answers (https://docs.slack.dev/apis/web-api/): HTTP 200 with ``{"ok": true}`` is delivered,
``{"ok": false, "error": ...}`` is sorted by its error:

* ``users_not_found`` (and ``channel_not_found``, ``is_archived``, ``cannot_dm_bot``, any error
  not named below): permanent for this recipient; the notice is ``failed``, others go on;
* ``invalid_auth``, ``not_authed``, ``account_inactive``, ``token_revoked``, ``token_expired``,
  ``missing_scope``: the token is unusable, so the whole channel is down; retried later;
* ``internal_error``, ``fatal_error``, ``service_unavailable``, ``request_timeout``,
  ``ratelimited``: retried with back-off.

HTTP 429 carries ``Retry-After`` (seconds): the channel pauses that long. 5xx and connection
failures are retried with back-off; another 4xx is permanent. ``chat.postMessage`` has no
idempotency key, so a POST whose answer was lost (read timeout, reset, ``fatal_error``) is
*in doubt*; the lookup before it never is (nothing is posted by it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import requests

from gpuwatch.alerts.base import Channel, ChannelError, Delivery, Message
from gpuwatch.alerts.slack import credential, post
from gpuwatch.config.alerts import SlackDmConfig

log = logging.getLogger(__name__)

SCOPES = "users:read.email, chat:write"
#: the token cannot be used at all: every notice of the channel would fail the same way
CHANNEL_DOWN = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "missing_scope"}
)
#: Slack's side failed; the same call may work later
TRANSIENT = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}
)


class SlackDmChannel(Channel):
    name = "slack_dm"

    def __init__(self, cfg: SlackDmConfig, *, session: requests.Session | None = None) -> None:
        self.cfg = cfg
        self._session = session
        #: email -> Slack user id, for the life of the channel (one lookup per person)
        self._user_ids: dict[str, str] = {}

    def send(self, message: Message, on_handoff: Callable[[], bool]) -> Delivery:
        token = credential(self.cfg.resolve_token, "alerts.slack_dm: no bot_token configured")
        user_id = self._user_id(token, message.recipient)
        if not on_handoff():
            raise ChannelError("lease lost before chat.postMessage", retry=True)
        body = {"channel": user_id, **message.payload}
        try:
            answer = self._call(token, "chat.postMessage", json=body, posts=True)
        except ChannelError as exc:
            if not exc.retry and not exc.channel_down:
                self._user_ids.pop(message.recipient, None)  # a stale id: look it up next time
            raise
        return Delivery(200, f"ok channel={answer.get('channel', user_id)} ts={answer.get('ts', '?')}")

    def _user_id(self, token: str, recipient: str) -> str:
        """The Slack user id of ``recipient`` (an email; a recipient without '@' is an id)."""
        if "@" not in recipient:
            return recipient
        if recipient not in self._user_ids:
            answer = self._call(token, "users.lookupByEmail", data={"email": recipient}, posts=False)
            user_id = (answer.get("user") or {}).get("id")
            if not user_id:
                raise ChannelError("users.lookupByEmail: answer without user.id", retry=True)
            self._user_ids[recipient] = str(user_id)
        return self._user_ids[recipient]

    def _call(self, token: str, method: str, *, posts: bool, **body: Any) -> dict[str, Any]:
        """POST one Web API method; the answer's JSON when ``ok``, else a ChannelError.
        ``posts``: the call may deliver the message, so a lost answer leaves it in doubt."""
        resp = post(
            self._session or requests,
            f"{self.cfg.api_url}/{method}",
            method,
            timeout=self.cfg.timeout_s,
            may_deliver=posts,
            headers={"Authorization": f"Bearer {token}"},
            **body,
        )
        text = resp.text[:300]
        if resp.status_code != 200:
            raise ChannelError(f"{method}: {resp.status_code}: {text}", retry=False, code=resp.status_code)
        try:
            answer = resp.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise ChannelError(
                f"{method}: not a Web API answer: {text!r}", retry=True, in_doubt=posts, code=200
            )
        if answer.get("ok") is True:
            return answer
        raise _refusal(method, answer, posts=posts)


def _refusal(method: str, answer: dict[str, Any], *, posts: bool) -> ChannelError:
    """The ChannelError of an ``{"ok": false}`` answer, by its ``error``."""
    error = str(answer.get("error") or "unknown_error")
    if error in CHANNEL_DOWN:
        needed = answer.get("needed")
        scope = f"the token lacks scope {needed}" if needed else f"the bot token needs scopes {SCOPES}"
        return ChannelError(
            f"{method}: {error} ({scope}; see alerts.slack_dm in docs/alerts.md)",
            retry=True,
            code=200,
            channel_down=True,
        )
    if error in TRANSIENT:
        # fatal_error: "some aspect of the operation may have succeeded"
        return ChannelError(
            f"{method}: {error}", retry=True, code=200, in_doubt=posts and error == "fatal_error"
        )
    return ChannelError(f"{method}: {error}", retry=False, code=200)
