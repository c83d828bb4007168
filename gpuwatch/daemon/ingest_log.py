"""What the daemon logs about ingest: a summary line a minute, and each request only if asked.

One INFO line per request is 100 lines/s at 1,000 nodes and 1,000 at 10,000: journald's
default rate limit (10,000 messages per 30 s per service) then drops lines, the warnings
among them, and the line itself was ~5-7 % of the daemon's samples (py-spy on the daemon
under 32 clients posting one-cycle batches).
So by default each process logs one ``ingest summary`` a minute (requests, batches by
outcome, samples, nodes, latency), plus a WARNING for every refused request or line. Requests
turned away because the daemon is busy (``daemon/admission.py``) are not refusals of the
agent's data and come in floods: they are counted in the summary (``shed``) with one WARNING
when shedding starts in a minute. A database outage likewise: one ERROR (with the driver's
traceback) a minute, and the 503s counted (``db_unavailable``).
``daemon.log_each_request = true`` brings back one INFO line per request (debugging one node).
The summary is written by the next request after the minute, or by :meth:`IngestLog.summarize_forever`
(a task of the app's lifespan) when no request comes: a daemon whose agents all went quiet
still logs the minute in which they did.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("gpuwatch.daemon.ingest")


def p99_of(ms: list[float]) -> float:
    """The 99th percentile among the minute's latencies, interpolated between them (inclusive):
    the exclusive method extrapolates past the slowest of a handful of requests."""
    if len(ms) < 2:
        return ms[0]
    return statistics.quantiles(ms, n=100, method="inclusive")[98]


class IngestLog:
    """Per-process tally of accepted requests, logged every ``every_s``.

    Handlers run on the event loop's one thread, so the tally needs no lock.
    """

    def __init__(
        self, *, each_request: bool, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.each_request = each_request
        self.every_s = every_s
        self._clock = clock
        self._reset(clock())

    def _reset(self, now: float) -> None:
        self._since = now
        self._requests = 0
        self._outcomes: dict[str, int] = {}
        self._samples = 0
        self._nodes: set[str] = set()
        self._ms: list[float] = []
        self._shed = 0
        self._unavailable = 0

    def request(
        self, message: str, node: str, outcomes: Mapping[str, int], samples: int, ms: float, **extra: Any
    ) -> None:
        """One answered request: ``outcomes`` counts its batches by result (stored, duplicate, refused)."""
        if self.each_request:
            log.info(message, extra={"node": node, **extra, "samples": samples, "ms": round(ms, 2)})
        self._requests += 1
        for outcome, n in outcomes.items():
            self._outcomes[outcome] = self._outcomes.get(outcome, 0) + n
        self._samples += samples
        self._nodes.add(node)
        self._ms.append(ms)
        if self._minute_over():
            self.flush()

    def _minute_over(self) -> bool:
        return self._clock() - self._since >= self.every_s

    async def summarize_forever(self) -> None:
        """Write the summary when its minute is over even if no request comes to do it; runs on
        the event loop (as the handlers do, so the tally still needs no lock) until cancelled."""
        while True:
            await asyncio.sleep(max(0.0, self.every_s - (self._clock() - self._since)) + 0.01)
            if self._minute_over():
                self.flush()

    def shed(self, retry_after_s: int) -> None:
        """A request answered 503 for load: counted; the minute's first one is warned."""
        if self._minute_over():
            self.flush()
        if not self._shed:
            log.warning(
                "daemon busy: turning agents away (503, Retry-After %d s); see daemon.max_inflight_bytes",
                retry_after_s,
            )
        self._shed += 1

    def unavailable(self, cause: BaseException | None) -> None:
        """A request answered 503 for a database outage: counted; the minute's first is an
        ERROR with the driver's exception and traceback."""
        if self._minute_over():
            self.flush()
        if not self._unavailable:
            log.error(
                "database unavailable: ingest answers 503, agents keep their batches (%s)",
                type(cause).__name__ if cause else "unknown",
                exc_info=cause,
            )
        self._unavailable += 1

    def flush(self) -> None:
        """Log the summary of what was tallied since the last one (nothing if no request came)."""
        now = self._clock()
        if self._requests or self._shed or self._unavailable:
            ms = sorted(self._ms) or [0.0]
            p99 = p99_of(ms)
            log.info(
                "ingest summary",
                extra={
                    "seconds": round(now - self._since, 1),
                    "requests": self._requests,
                    "batches": dict(sorted(self._outcomes.items())),
                    "samples": self._samples,
                    "nodes": len(self._nodes),
                    "shed": self._shed,
                    "db_unavailable": self._unavailable,
                    "ms_p50": round(statistics.median(ms), 2),
                    "ms_p99": round(p99, 2),
                    "ms_max": round(ms[-1], 2),
                },
            )
        self._reset(now)
