"""Admission: a bound on the request bodies one daemon process holds at once.

After an outage every agent replays its backlog at the same moment, in bundles of up to
4 MiB; a body parsed into models takes ~5x its size (``bench/replay_storm.py``), so 1,000
agents would ask for ~25 GB, and the unit's ``MemoryMax`` would kill the daemon, whose
restart meets the same herd. So the bytes of the bodies being read, parsed, queued and stored
stay within ``daemon.max_inflight_bytes``; a request that would pass it is answered 503 with
``Retry-After`` at once, and its agent keeps the batches and comes back after that plus its
own jittered back-off.

Bytes are counted as they arrive, for every body: one that declares its Content-Length holds
that much before a byte is read (refused before it is read), one sent chunked (no length)
holds what has arrived so far and is refused mid-body, at the chunk that would pass the bound.
A body that passes ``daemon.max_batch_bytes`` is answered 413 at that chunk, and one that is
not all there within ``daemon.body_timeout_s`` 408: a slow client cannot keep its share of the
bound for long. A refusal mid-body closes the connection (``Connection: close``), so the rest
of that body is never read. A request that is the only one holding bytes is always admitted
(it is within ``max_batch_bytes``), so one large batch can always get through.

What a process holds is then at most the larger of ``max_inflight_bytes`` and
``max_batch_bytes``, plus one chunk per connection that the server has received and not yet
handed over (uvicorn stops reading a connection past 64 KiB waiting). Handlers run on the event
loop's one thread, so the count needs no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Iterator

from fastapi import HTTPException
from prometheus_client import Counter, Gauge
from starlette.requests import ClientDisconnect

INFLIGHT_BYTES = Gauge(
    "gpuwatch_daemon_ingest_inflight_bytes", "Bytes of ingest request bodies held now (this process)."
)
SHED = Counter(
    "gpuwatch_daemon_ingest_shed_total",
    "Ingest requests answered 503 because daemon.max_inflight_bytes was reached.",
)
#: a refusal before the whole body arrived: the connection closes, so the rest is never read
_CLOSE = {"Connection": "close"}


class Busy(HTTPException):
    """503 with Retry-After: the agent keeps its batches and comes back later."""

    def __init__(
        self, inflight: int, size: int, limit: int, retry_after_s: int, *, mid_body: bool = False
    ) -> None:
        super().__init__(
            status_code=503,
            detail=(
                f"daemon busy: {inflight} bytes of batches in flight, {size} more would pass "
                f"daemon.max_inflight_bytes ({limit}); retry after {retry_after_s} s"
            ),
            headers={"Retry-After": str(retry_after_s), **(_CLOSE if mid_body else {})},
        )
        self.retry_after_s = retry_after_s


class BodyTooLarge(HTTPException):
    """413 at the chunk that passes ``daemon.max_batch_bytes``: the batch is bad as it is."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            status_code=413,
            detail=f"body exceeds the limit of {limit} bytes (daemon.max_batch_bytes)",
            headers=_CLOSE,
        )


class BodyTimeout(HTTPException):
    """408: the body did not arrive within ``daemon.body_timeout_s``; the agent retries."""

    def __init__(self, timeout_s: float, received: int) -> None:
        super().__init__(
            status_code=408,
            detail=(
                f"request body not received within {timeout_s:g} s (daemon.body_timeout_s); "
                f"{received} bytes had arrived"
            ),
            headers=_CLOSE,
        )


class BodyAbandoned(HTTPException):
    """The client closed the connection before its body was complete: nobody reads the answer;
    it is counted and logged as a refusal (one line, not an unhandled disconnect)."""

    def __init__(self, received: int) -> None:
        super().__init__(
            status_code=400,
            detail=f"the client closed the connection after {received} bytes of its body",
            headers=_CLOSE,
        )


class Hold:
    """The bytes one request holds, grown as its body arrives and released when it is done."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.bytes = 0

    def grow_to(self, size: int, *, mid_body: bool = False) -> None:
        """Hold ``size`` bytes in all (no-op if already held); :class:`Busy` if that passes the
        bound while other requests hold bytes too."""
        more = size - self.bytes
        if more <= 0:
            return
        self.admission.take(more, alone=self.admission.inflight == self.bytes, mid_body=mid_body)
        self.bytes = size

    def release(self) -> None:
        self.admission.give_back(self.bytes)
        self.bytes = 0


class Admission:
    def __init__(self, max_bytes: int, retry_after_s: int = 5, body_timeout_s: float = 60.0) -> None:
        self.max_bytes = max_bytes
        self.retry_after_s = retry_after_s
        self.body_timeout_s = body_timeout_s
        self.inflight = 0

    def take(self, size: int, *, alone: bool, mid_body: bool = False) -> None:
        """Count ``size`` more bytes as held; :class:`Busy` if over the bound and not ``alone``."""
        if not alone and self.inflight + size > self.max_bytes:
            SHED.inc()
            raise Busy(self.inflight, size, self.max_bytes, self.retry_after_s, mid_body=mid_body)
        self.inflight += size
        INFLIGHT_BYTES.set(self.inflight)

    def give_back(self, size: int) -> None:
        self.inflight -= size
        INFLIGHT_BYTES.set(self.inflight)

    @contextlib.contextmanager
    def hold(self, size: int) -> Iterator[None]:
        """Count ``size`` bytes as held while the block runs; :class:`Busy` if over the bound."""
        hold = Hold(self)
        hold.grow_to(size)
        try:
            yield
        finally:
            hold.release()

    @contextlib.asynccontextmanager
    async def body(
        self, declared: int | None, chunks: AsyncIterable[bytes], limit: int
    ) -> AsyncIterator[bytes]:
        """The request body, counted against the bound as it arrives (by its Content-Length
        first, when the client declared one); held until the block ends."""
        hold = Hold(self)
        try:
            hold.grow_to(declared or 0)
            yield await self._read(chunks, hold, limit)
        finally:
            hold.release()

    async def _read(self, chunks: AsyncIterable[bytes], hold: Hold, limit: int) -> bytes:
        """All of ``chunks`` within ``body_timeout_s``, each counted before it is kept."""
        received: list[bytes] = []
        size = 0

        async def read_all() -> None:
            nonlocal size
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(limit)
                hold.grow_to(size, mid_body=True)
                received.append(chunk)

        try:
            await asyncio.wait_for(read_all(), self.body_timeout_s)
        except asyncio.TimeoutError:
            raise BodyTimeout(self.body_timeout_s, size) from None
        except ClientDisconnect:
            raise BodyAbandoned(size) from None
        return b"".join(received)
