"""1,000 simulated agents at once against one daemon process on PostgreSQL (loopback only).

Each agent has its own node and token and posts 2 small batches (2 GPUs + host samples) one
after the other; all 1,000 start together, so up to 1,000 connections are open at once. The
clients are coroutines on one asyncio loop (httpx2), in this process; the daemon is its own
process (one uvicorn worker), so on 2 cores the two share the machine.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from gpuwatch import wire
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.nodes import TOKEN_PREFIX, hash_token
from gpuwatch.sql.schema import ingested_batches, nodes
from tests import factories
from tests.daemon_process import DaemonProcess

httpx2 = pytest.importorskip("httpx2")

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

AGENTS = 1000
BATCHES = 2


def _register(engine: sa.Engine) -> dict[str, str]:
    """1,000 nodes with their tokens in one statement (create_token is one transaction each)."""
    now = wire.utcnow()
    tokens = {f"load{i:04d}": f"{TOKEN_PREFIX}load-{i:04d}-{time.time_ns()}" for i in range(AGENTS)}
    with engine.begin() as conn:
        conn.execute(
            nodes.insert(),
            [
                {"name": n, "token_sha256": hash_token(t), "token_created_at": now, "created_at": now}
                for n, t in tokens.items()
            ],
        )
    return tokens


def _body(node: str, k: int) -> bytes:
    ts = wire.utcnow() - timedelta(seconds=10 * (BATCHES - k))
    samples = [factories.gpu_sample(ts, i) for i in range(2)] + factories.host_samples(ts)
    return wire.Batch(node=node, agent_version="load", seq=k, samples=samples).model_dump_json().encode()


async def _agents(url: str, tokens: dict[str, str]) -> tuple[list[float], list[int], float]:
    bodies = {n: [_body(n, k) for k in range(BATCHES)] for n in tokens}
    latencies: list[float] = []
    statuses: list[int] = []
    limits = httpx2.Limits(max_connections=AGENTS, max_keepalive_connections=AGENTS)
    async with httpx2.AsyncClient(base_url=url, limits=limits, timeout=60.0) as client:
        start = asyncio.Event()

        async def agent(node: str) -> None:
            await start.wait()
            for body in bodies[node]:
                t = time.perf_counter()
                r = await client.post(
                    f"/api/v1/ingest/{node}",
                    content=body,
                    headers={"Authorization": f"Bearer {tokens[node]}", "Content-Type": "application/json"},
                )
                latencies.append(time.perf_counter() - t)
                statuses.append(r.status_code)

        tasks = [asyncio.create_task(agent(n)) for n in tokens]
        await asyncio.sleep(0)
        t0 = time.perf_counter()
        start.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=90)
        elapsed = time.perf_counter() - t0
    return latencies, statuses, elapsed


def test_thousand_agents_at_once_all_stored(pg_url, tmp_path):
    engine = create_engine(pg_url)
    migrate.upgrade(engine)
    tokens = _register(engine)
    daemon = DaemonProcess(pg_url, tmp_path / "daemon.log")
    daemon.start()
    try:
        latencies, statuses, elapsed = asyncio.run(_agents(daemon.url, tokens))
    finally:
        daemon.stop()
    with engine.connect() as conn:
        stored = conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar()
        groups = conn.execute(sa.select(sa.func.count(sa.distinct(ingested_batches.c.received_at)))).scalar()
    engine.dispose()
    requests_n = AGENTS * BATCHES
    p50, p99 = (statistics.quantiles(latencies, n=100)[q - 1] * 1000 for q in (50, 99))
    print(
        f"\n{AGENTS} agents x {BATCHES} batches: {requests_n} requests in {elapsed:.2f} s = "
        f"{requests_n / elapsed:,.0f} batches/s; latency p50 {p50:.0f} ms p99 {p99:.0f} ms, "
        f"max {max(latencies) * 1000:.0f} ms; {groups} commit groups"
    )
    assert sorted(set(statuses)) == [200], {s: statuses.count(s) for s in set(statuses)}
    assert stored == requests_n
