"""Admission: a bound on the request bodies one daemon process holds at once.

After an outage every agent replays its backlog at the same moment, in bundles of up to
4 MiB; a body parsed into models takes ~5x its size (``bench/replay_storm.py``), so 1,000
agents would ask for ~25 GB, and the unit's ``MemoryMax`` would kill the daemon, whose
restart meets the same herd. So a request is admitted only while the bytes of the bodies
being read, parsed, queued and stored stay within ``daemon.max_inflight_bytes``; the others
are answered 503 with ``Retry-After`` at once, before their body is read, and their agents
keep the batches and come back after that plus their own jittered back-off. A request
arriving when nothing is in flight is always admitted (it is within ``max_batch_bytes``).
Handlers run on the event loop's one thread, so the count needs no lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from fastapi import HTTPException
from prometheus_client import Counter, Gauge

INFLIGHT_BYTES = Gauge(
    "gpuwatch_daemon_ingest_inflight_bytes", "Bytes of ingest request bodies held now (this process)."
)
SHED = Counter(
    "gpuwatch_daemon_ingest_shed_total",
    "Ingest requests answered 503 because daemon.max_inflight_bytes was reached.",
)


class Busy(HTTPException):
    """503 with Retry-After: the agent keeps its batches and comes back later."""

    def __init__(self, inflight: int, size: int, limit: int, retry_after_s: int) -> None:
        super().__init__(
            status_code=503,
            detail=(
                f"daemon busy: {inflight} bytes of batches in flight, {size} more would pass "
                f"daemon.max_inflight_bytes ({limit}); retry after {retry_after_s} s"
            ),
            headers={"Retry-After": str(retry_after_s)},
        )
        self.retry_after_s = retry_after_s


class Admission:
    def __init__(self, max_bytes: int, retry_after_s: int = 5) -> None:
        self.max_bytes = max_bytes
        self.retry_after_s = retry_after_s
        self.inflight = 0

    @contextlib.contextmanager
    def hold(self, size: int) -> Iterator[None]:
        """Count ``size`` bytes as held while the block runs; :class:`Busy` if over the bound."""
        if size <= 0:
            yield
            return
        if self.inflight and self.inflight + size > self.max_bytes:
            SHED.inc()
            raise Busy(self.inflight, size, self.max_bytes, self.retry_after_s)
        self.inflight += size
        INFLIGHT_BYTES.set(self.inflight)
        try:
            yield
        finally:
            self.inflight -= size
            INFLIGHT_BYTES.set(self.inflight)

    @contextlib.asynccontextmanager
    async def body(self, declared: int | None, read: Callable[[], Awaitable[bytes]]) -> AsyncIterator[bytes]:
        """The request body, admitted by its Content-Length before it is read (by its real
        length after reading, when the client declared none); held until the block ends."""
        with self.hold(declared or 0):
            body = await read()
            with self.hold(len(body) if declared is None else 0):
                yield body
