"""Shared pieces of the fault tests: agents in this process, daemons and a PostgreSQL of our own.

The agent runs in the test process (a spy on the real Pusher sees every answer), the daemon is
a real ``gpuwatch daemon`` process (:class:`tests.daemon_process.DaemonProcess`).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gpuwatch.agent import Agent, Spool
from gpuwatch.clock import utcnow
from gpuwatch.collectors import build_collectors
from gpuwatch.config import load_settings
from gpuwatch.sql.gpu_readings import count_gpu_samples
from gpuwatch.sql.nodes import create_token
from gpuwatch.sql.schema import ingested_batches
from tests.conftest import free_port
from tests.pushers import RecordingPusher

PG_BIN = Path("/usr/lib/postgresql/15/bin")


class VirtualTime:
    """An injected clock for the sample loop: ``sleep`` advances time instead of waiting.

    Only the thread that runs ``Agent.run`` moves the clock; the sender thread (which shares
    the agent's ``sleep`` for its back-off) waits a little real time, so it neither spins nor
    fast-forwards the sampling.
    """

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.t = 0.0
        self.sampler: int | None = None

    def clock(self) -> float:
        return self.t

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.t)

    def sleep(self, stop: threading.Event, seconds: float) -> bool:
        if threading.get_ident() == self.sampler:
            self.t += max(0.0, seconds)
            return stop.is_set()
        return stop.wait(min(max(0.0, seconds), 0.05))


def make_agent(
    url: str,
    token: str,
    spool_dir: Path,
    *,
    node: str,
    interval_s: float = 0.2,
    gpus: int = 4,
    spool_max_bytes: int = 16 * 2**20,
    clock: VirtualTime | None = None,
    now: Callable[[], datetime] | None = None,
    merge_backlog: bool = True,
    agent_settings: dict | None = None,
    rng: random.Random | None = None,
    push_timeout_s: float = 3.0,
) -> tuple[Agent, RecordingPusher]:
    """An agent of ``node`` on simulated GPUs pushing to ``url`` through a RecordingPusher."""
    settings = load_settings(
        None,
        agent={
            "node": node,
            "daemon_url": url,
            "token": token,
            "interval_s": interval_s,
            "spool_dir": str(spool_dir),
            "backoff_initial_s": 0.05,
            "backoff_max_s": 0.3,
            "push_timeout_s": push_timeout_s,
            "merge_backlog": merge_backlog,
            "push_every": 1,  # a push per cycle: the outages, not the holding back, are under test
            **(agent_settings or {}),
        },
        gpu={"backend": "sim", "sim_scenario": "training", "sim_gpus": gpus, "sim_seed": 7},
    )
    pusher = RecordingPusher(url, node, token, push_timeout_s)
    kwargs: dict = {"rng": rng}
    if clock is not None:
        kwargs.update(clock=clock.clock, sleep=clock.sleep, now=clock.now)
    if now is not None:
        kwargs["now"] = now
    agent = Agent(settings, build_collectors(settings), Spool(spool_dir, spool_max_bytes), pusher, **kwargs)
    return agent, pusher


def node_agent(
    url: str, engine: sa.Engine, spool_parent: Path, node: str, **kwargs: Any
) -> tuple[Agent, RecordingPusher]:
    """:func:`make_agent` for a new node: its token made, its spool ``spool_parent / node``."""
    return make_agent(url, create_token(engine, node), spool_parent / node, node=node, **kwargs)


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str, step_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(step_s)


def stored_batches(engine: sa.Engine) -> dict[str, int]:
    """batch_id -> samples, as the daemon recorded them."""
    with engine.connect() as conn:
        rows = conn.execute(sa.select(ingested_batches.c.batch_id, ingested_batches.c.samples)).all()
    return {str(b): n for b, n in rows}


def gpu_row_count(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return count_gpu_samples(conn)


def acked_gpu_stamps(pushers: Iterable[RecordingPusher]) -> Counter:
    """(node, stamp) -> GPU samples, over the distinct batches the daemon acknowledged (a
    batch answered twice, e.g. ``duplicate`` after a lost answer, counts once)."""
    batches = {str(b.batch_id): b for pusher in pushers for b in pusher.delivered}
    return Counter((b.node, s.ts) for b in batches.values() for s in b.samples if s.kind == "gpu")


def assert_exactly_once(
    engine: sa.Engine, pushers: RecordingPusher | list[RecordingPusher], cycles: int, gpus: int
) -> None:
    """0 lost, 0 duplicated, per agent: every cycle's GPU samples in exactly one acknowledged
    batch (a cycle's own, or one merged from a backlog), every acknowledged batch recorded by
    the daemon with its sample count and nothing else, every GPU sample stored once."""
    pushers = pushers if isinstance(pushers, list) else [pushers]
    acked = {str(b.batch_id): len(b.samples) for pusher in pushers for b in pusher.delivered}
    assert stored_batches(engine) == acked  # same ids, same sample counts, nothing extra
    stamps = acked_gpu_stamps(pushers)
    assert len(stamps) == len(pushers) * cycles, f"{len(stamps)} cycles acknowledged, {cycles} made per agent"
    assert set(stamps.values()) == {gpus}, "each cycle's GPUs in one acknowledged batch"
    assert gpu_row_count(engine) == len(pushers) * cycles * gpus


class OwnPostgres:
    """A throwaway PostgreSQL 15 cluster on a free port, ours to stop and restart.

    Never the shared server at :5432: other engineers' tests use that one.
    """

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gpuwatch-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        shutil.chown(self.dir, "postgres", "postgres")
        self._pg(
            [str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"],
            timeout=60,
        )

    @staticmethod
    def _pg(args: list[str], timeout: float) -> None:
        cmd = ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed: {out.stdout[-1000:]} {out.stderr[-1000:]}")

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._pg(
            [
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(self.data),
                "-o",
                opts,
                "-l",
                str(self.dir / "pg.log"),
                "-w",
                "-t",
                "30",
                "start",
            ],
            timeout=40,
        )

    def stop(self, mode: str = "fast") -> None:
        self._pg([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop"], 40)

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def destroy(self) -> None:
        if self.running():
            with contextlib.suppress(Exception):
                self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"no PostgreSQL 15 binaries at {PG_BIN}")
    pg = OwnPostgres()
    try:
        pg.start()
        yield pg
    finally:
        pg.destroy()


def recent_start(minutes: float) -> datetime:
    return utcnow() - timedelta(minutes=minutes)
