"""What every channel module (``slack.py``, ``email.py``) provides, and the one error it raises.

Exceptions::

    ChannelError                 the send did not (certainly) succeed
      ├─ retry=True              an outage, 5xx, 429, a timeout: the worker backs off and retries
      ├─ retry=False             a permanent refusal (bad webhook, unknown recipient): 'failed'
      └─ in_doubt=True           the message was handed over and then the answer was lost: it may
                                 have been delivered (the channel's in_doubt policy decides)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class ChannelError(Exception):
    def __init__(
        self,
        message: str,
        *,
        retry: bool,
        in_doubt: bool = False,
        code: int | None = None,
        retry_after_s: float | None = None,
        channel_down: bool = False,
    ) -> None:
        super().__init__(message)
        self.retry = retry
        self.in_doubt = in_doubt
        self.code = code
        self.retry_after_s = retry_after_s
        #: the whole channel is unavailable (refused connection, 429): skip its other notices
        #: in this round instead of failing each in turn
        self.channel_down = channel_down


@dataclass(frozen=True)
class Delivery:
    """What the channel said when it accepted a message."""

    code: int | None
    detail: str


@dataclass(frozen=True)
class Message:
    """A stored notice as a channel sends it: ``payload`` is what the renderer made."""

    outbox_id: int
    dedup_key: str
    recipient: str
    subject: str
    payload: dict[str, Any]


class Channel(ABC):
    name: str

    @abstractmethod
    def send(self, message: Message, on_handoff: Callable[[], bool]) -> Delivery:
        """Send ``message``; call ``on_handoff()`` immediately before the step after which the
        message may have been delivered, and abandon the send (raise a retryable ChannelError)
        if it returns False (the worker's lease is gone)."""
