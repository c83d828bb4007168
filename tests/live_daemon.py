"""An agent on a live daemon, on a virtual clock: the set-up of the end-to-end tests that drive a
fake GPU library through the real agent, HTTP ingest, rollups and classifier.

The daemon runs in this process with its scheduler paused (the test rolls up and classifies
itself); the agent is :func:`gpuwatch.workload.validate.clocked_agent`, as ``gpuwatch validate``
runs it. Imports are inside the functions, so collecting a test imports no daemon.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuwatch.collectors.base import Collector
    from gpuwatch.daemon.server import BackgroundServer


@dataclass(frozen=True)
class Span:
    """``cycles + 1`` agent cycles ``interval_s`` apart, from ``start`` to ``end``."""

    start: datetime
    cycles: int
    interval_s: float

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.cycles * self.interval_s)


def recent_span(minutes: int, interval_s: float) -> Span:
    """``minutes`` of cycles ending five minutes before this minute: whole minutes to roll up."""
    from gpuwatch.sql.rollups import floor_minute

    start = floor_minute(datetime.now(timezone.utc)) - timedelta(minutes=minutes + 5)
    return Span(start, int(minutes * 60 / interval_s), interval_s)


@contextmanager
def paused_daemon(db_url: str) -> Iterator[BackgroundServer]:
    """A daemon on a free port of 127.0.0.1, storing into ``db_url``, its scheduler paused."""
    from gpuwatch.config import Settings
    from gpuwatch.daemon.server import BackgroundServer

    settings = Settings().with_overrides(database={"url": db_url}, daemon={"listen": "127.0.0.1:0"})
    with BackgroundServer(settings) as server:
        server.scheduler.pause()
        yield server


def run_agent(
    server: BackgroundServer,
    node: str,
    collectors: Sequence[Collector],
    span: Span,
    spool_parent: Path,
    poll: Callable[[], Any],
) -> None:
    """``node``'s agent (its token made here) through ``span``, ``poll()`` (the fake library's
    time passing) before each cycle; every batch must reach the daemon."""
    from gpuwatch.sql.nodes import create_token
    from gpuwatch.workload.validate import clocked_agent

    token = create_token(server.engine, node)
    spool_dir = Path(tempfile.mkdtemp(prefix="spool-", dir=spool_parent))
    clock = {"now": span.start}
    agent = clocked_agent(server.url, node, token, list(collectors), spool_dir, clock)
    try:
        for k in range(span.cycles + 1):
            poll()
            clock["now"] = span.start + timedelta(seconds=k * span.interval_s)
            agent.cycle()
    finally:
        drained = agent.drain(60)
        agent.close()
    assert drained, "the daemon did not take every batch"
