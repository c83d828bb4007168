"""1,000 simulated agents at once against one daemon process on PostgreSQL (loopback only).

Each agent has its own node and token and posts 2 small batches (2 GPUs + host samples) one
after the other; all 1,000 start together, so up to 1,000 connections are open at once. In
the replay cases each agent instead sends a one-minute backlog (6 batches) at once, as all
agents do when the daemon comes back after an outage: as one bundle (v1 spools, or
``merge_backlog = false``), or merged into one v2 batch (what agents send since the seventh
session of issue 7). The
clients are coroutines on one asyncio loop (httpx2), in this process; the daemon is its own
process (one uvicorn worker), so on 2 cores the two share the machine.

Like the real agent, a simulated one whose connection breaks (the daemon closes an idle
keep-alive connection just as the client, slowed by 999 siblings, reuses it) sends the same
batch again after a pause: batches are idempotent, so the test counts those resends and
asserts that every batch is stored exactly once and that the daemon never answered 5xx.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from gpuwatch import wire
from gpuwatch.agent import merge
from gpuwatch.clock import utcnow
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.gpu_readings import count_gpu_samples
from gpuwatch.sql.nodes import TOKEN_PREFIX
from gpuwatch.sql.schema import ingested_batches
from gpuwatch.wire import v2 as wire_v2
from tests import factories
from tests.daemon_process import DaemonProcess

httpx2 = pytest.importorskip("httpx2")

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

AGENTS = 1000
BATCHES = 2
BACKLOG = 6  # the replay case: a minute of 10 s cycles per agent


def _register(engine: sa.Engine) -> dict[str, str]:
    """1,000 nodes with their tokens in one statement (create_token is one transaction each)."""
    tokens = {f"load{i:04d}": f"{TOKEN_PREFIX}load-{i:04d}-{time.time_ns()}" for i in range(AGENTS)}
    return factories.register_nodes(engine, tokens)


def _body(node: str, k: int, batches: int) -> bytes:
    ts = utcnow() - timedelta(seconds=10 * (batches - k))
    samples = [factories.gpu_sample(ts, i) for i in range(2)] + factories.host_samples(ts)
    return wire.Batch(node=node, agent_version="load", seq=k, samples=samples).model_dump_json().encode()


#: resends after a broken connection per batch before the test gives up on it
MAX_RESENDS = 5


def _merged(bodies: list[bytes]) -> bytes:
    """The backlog as the agent merges it: one v2 batch with every cycle."""
    return merge.encode(
        merge.merge(merge.parse([wire_v2.encode(wire.Batch.model_validate_json(b), 2) for b in bodies]))
    )


async def _agents(
    url: str, tokens: dict[str, str], batches: int, shape: str
) -> tuple[list[float], list[int], float, int]:
    """Latencies per request; statuses per request, then per bundle line (200: stored or a
    duplicate); elapsed seconds; resends."""
    bodies = {n: [_body(n, k, batches) for k in range(batches)] for n in tokens}
    bundle = shape == "bundle"
    if bundle:  # the whole backlog in one request, one batch per line
        bodies = {n: [b"\n".join(parts)] for n, parts in bodies.items()}
    elif shape == "merged":
        bodies = {n: [_merged(parts)] for n, parts in bodies.items()}
    version = 2 if shape == "merged" else 1
    path, content_type = ("/bundle", "application/x-ndjson") if bundle else ("", "application/json")
    latencies: list[float] = []
    statuses: list[int] = []
    lines: list[str] = []  # a bundle's per-line results
    resends = 0
    headers = {n: {"Authorization": f"Bearer {t}", "Content-Type": content_type} for n, t in tokens.items()}
    limits = httpx2.Limits(max_connections=AGENTS, max_keepalive_connections=AGENTS)
    async with httpx2.AsyncClient(base_url=url, limits=limits, timeout=60.0) as client:
        start = asyncio.Event()

        async def post(node: str, body: bytes) -> int:
            """The status of one batch, resent like the agent does after a transport error."""
            nonlocal resends
            for attempt in range(MAX_RESENDS + 1):
                try:
                    r = await client.post(
                        f"/api/v{version}/ingest/{node}{path}", content=body, headers=headers[node]
                    )
                    if bundle and r.status_code == 200:  # each line's own answer
                        lines.extend(x["status"] for x in r.json()["results"])
                    return r.status_code
                except httpx2.TransportError:
                    if attempt == MAX_RESENDS:
                        raise
                    resends += 1
                    await asyncio.sleep(0.5 * 2**attempt)
            raise AssertionError("unreachable")

        async def agent(node: str) -> None:
            await start.wait()
            for body in bodies[node]:
                t = time.perf_counter()
                statuses.append(await post(node, body))
                latencies.append(time.perf_counter() - t)

        tasks = [asyncio.create_task(agent(n)) for n in tokens]
        await asyncio.sleep(0)
        t0 = time.perf_counter()
        start.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=90)
        elapsed = time.perf_counter() - t0
    return latencies, statuses + [200 if x in ("stored", "duplicate") else 0 for x in lines], elapsed, resends


@pytest.mark.parametrize(
    ("batches", "shape"),
    [(BATCHES, "push"), (BACKLOG, "bundle"), (BACKLOG, "merged")],
    ids=["push", "replay", "replay-merged"],
)
def test_thousand_agents_at_once_all_stored(pg_url, tmp_path, batches, shape):
    engine = create_engine(pg_url)
    try:
        migrate.upgrade(engine)
        tokens = _register(engine)
        daemon = DaemonProcess(pg_url, tmp_path / "daemon.log")
        daemon.start()
        try:
            latencies, statuses, elapsed, resends = asyncio.run(_agents(daemon.url, tokens, batches, shape))
        finally:
            daemon.stop()
        with engine.connect() as conn:
            stored = conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar()
            gpu_rows = count_gpu_samples(conn)
            groups = conn.execute(
                sa.select(sa.func.count(sa.distinct(ingested_batches.c.received_at)))
            ).scalar()
    finally:
        engine.dispose()
    batches_n = AGENTS * batches
    p50, p99 = (statistics.quantiles(latencies, n=100)[q - 1] * 1000 for q in (50, 99))
    bundle = shape == "bundle"
    described = {
        "push": f"{batches} batches one by one",
        "bundle": f"one bundle of {batches}",
        "merged": f"{batches} batches merged into one",
    }[shape]
    print(
        f"\n{AGENTS} agents x {described}: {batches_n} batches in {len(latencies)} requests in "
        f"{elapsed:.2f} s = {batches_n / elapsed:,.0f} batches/s; latency per request p50 {p50:.0f} ms "
        f"p99 {p99:.0f} ms, max {max(latencies) * 1000:.0f} ms; {groups} commit groups; "
        f"{resends} resends after a broken connection"
    )
    assert sorted(set(statuses)) == [200], {s: statuses.count(s) for s in set(statuses)}
    assert len(statuses) == len(latencies) + (batches_n if bundle else 0)  # every line answered
    assert stored == (AGENTS if shape == "merged" else batches_n)  # a merged batch is one
    assert gpu_rows == batches_n * 2  # 2 GPUs per cycle, each stored once
