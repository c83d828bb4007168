"""Waiting out a failed push: the back-off, cut short when a cheap probe sees the daemon back.

The back-off (1 s doubling to ``agent.backoff_max_s``, full jitter) keeps a thousand agents from
hammering a daemon that is down, but after a long outage it also keeps them away for minutes
after it is back. So while an agent backs off from an outage (no connection, no answer,
502/503/504 without ``Retry-After``: :func:`~gpuwatch.agent.push.daemon_down`) it asks the
daemon's ``/healthz`` every ``agent.probe_interval_s`` (0.5-1.5x, so agents do not probe in
step): a GET with no token and no body. When a probe that follows a failed one (or the outage
itself) is answered 200, the agent sends after uniform(0, ``agent.recovery_jitter_s``) (or when
its back-off ends, if sooner): every agent is back within ~1.5 probe intervals plus that window
of the daemon answering, spread over the window rather than in one burst.

What the probes do not override: a ``Retry-After`` (the daemon asked for that wait, so there is
no probing before it is over), and a failure that is not an outage (401/403/404, a refused
batch): the daemon is up, so a probe answering 200 says nothing new and the back-off runs its
course. A probe answered 200 while nothing had been seen down (the attempt a probe woke failed
again, e.g. the database still refusing) does not end the wait either, so such a daemon gets
at most one attempt per back-off, not one per probe.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuwatch.agent.push import Outcome, PushResult

#: why a wait ended: its back-off ran out; a probe saw the daemon back; a stop or a drain cut it
ENDED_BACKOFF, ENDED_PROBE, ENDED_INTERRUPTED = "backoff", "probe", "interrupted"


@dataclass
class BackoffWait:
    """One wait between failed attempts as the sender decided it (for the log, metrics, tests)."""

    started_at: float  # the agent's clock
    backoff_s: float
    probe_gaps_s: list[float] = field(default_factory=list)
    #: each probe's HTTP status, None when it got no answer
    probes: list[int | None] = field(default_factory=list)
    #: after a probe saw the daemon back: the spread chosen before sending
    jitter_s: float | None = None
    ended: str = ENDED_BACKOFF


class Recovery:
    """Decides and performs the waits; ``pause(seconds)`` waits and returns True when cut short
    (a stop, or a drain asking for an attempt now)."""

    def __init__(
        self,
        probe: Callable[[], PushResult],
        clock: Callable[[], float],
        pause: Callable[[float], bool],
        rng: random.Random,
        interval_s: float,
        jitter_s: float,
    ) -> None:
        self._probe = probe
        self._clock = clock
        self._pause = pause
        self._rng = rng
        self.interval_s = interval_s
        self.jitter_s = jitter_s

    def wait(self, backoff_s: float, *, probing: bool, seen_down: bool) -> BackoffWait:
        """Wait ``backoff_s``; with ``probing``, probe meanwhile and end early once the daemon
        answers after being seen down (``seen_down``: the failure itself showed it)."""
        record = BackoffWait(self._clock(), backoff_s)
        if not probing:
            return self._until(record, backoff_s, ENDED_BACKOFF)
        deadline = self._clock() + backoff_s
        not_before = 0.0
        while True:
            gap = max(self._rng.uniform(0.5, 1.5) * self.interval_s, not_before)
            remaining = deadline - self._clock()
            if remaining <= gap:
                return self._until(record, remaining, ENDED_BACKOFF)
            if self._pause(gap):
                record.ended = ENDED_INTERRUPTED
                return record
            record.probe_gaps_s.append(gap)
            answer = self._probe()
            record.probes.append(answer.status)
            if answer.outcome is not Outcome.OK:
                seen_down = True
                not_before = self._honoured(answer.retry_after_s)
                continue
            if not seen_down:  # up all along: the failure was not an outage
                return self._until(record, deadline - self._clock(), ENDED_BACKOFF)
            # spread over the window, but never later than the back-off alone would have tried
            record.jitter_s = min(self._rng.uniform(0.0, self.jitter_s), max(0.0, deadline - self._clock()))
            return self._until(record, record.jitter_s, ENDED_PROBE)

    def _honoured(self, retry_after_s: float | None) -> float:
        """The least gap before the next probe: 1-1.5x a probe's ``Retry-After``, else none."""
        return 0.0 if retry_after_s is None else self._rng.uniform(retry_after_s, 1.5 * retry_after_s)

    def _until(self, record: BackoffWait, seconds: float, ended: str) -> BackoffWait:
        record.ended = ENDED_INTERRUPTED if self._pause(max(0.0, seconds)) else ended
        return record
