"""A spy on the agent's real pusher, for tests that must know what the daemon acknowledged."""

from __future__ import annotations

import threading

from gpuwatch.agent.push import Outcome, Pusher
from gpuwatch.wire import Batch
from gpuwatch.wire import v2 as wire_v2


class RecordingPusher(Pusher):
    """The real pusher, remembering every status and every batch answered stored/duplicate
    (alone, or as a line of a bundle), and how many went in bundles."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.delivered: list[Batch] = []
        self.statuses: list[int | None] = []
        self.bundles: list[int] = []  # batches per bundle request answered 200
        self._lock = threading.Lock()

    def send_bundle(self, bodies: list[bytes]):
        result = super().send_bundle(bodies)
        with self._lock:
            self.statuses.append(result.request.status)
            if result.items is not None:
                self.bundles.append(len(bodies))
                for body, item in zip(bodies, result.items, strict=True):
                    if item.outcome is Outcome.OK:
                        self.delivered.append(wire_v2.decode(body))
        return result

    def send(self, body: bytes):
        result = super().send(body)
        with self._lock:
            self.statuses.append(result.status)
            if result.outcome is Outcome.OK:
                self.delivered.append(wire_v2.decode(body))
        return result
