"""A replay storm: the daemon's peak memory with ``daemon.max_inflight_bytes`` and without it.

    .venv/bin/python bench/replay_storm.py [--agents 200] [--backlog 64] [--gpus 8] [--stall-s 10]
                                           [--rounds 2] [--wire 2] [--merge]

After an outage every agent sends its spool backlog at once, as a bundle of up to 64
batches (``agent.bundle_max_batches``). This starts a real ``gpuwatch daemon`` process on a
throwaway PostgreSQL database (127.0.0.1:5432 or $GPUWATCH_BENCH_PG) and lets ``--agents``
client threads post one such bundle each (one-cycle batches of ``--gpus`` GPUs, as
``bench/ingest.py`` makes them), all released together. A client answered 503 waits as the
agent does (``Agent.retry_delay``: its backoff, but at least uniform(1x, 1.5x) the daemon's
``Retry-After``) and sends again; with ``--compare-retry``, also in lockstep (the backoff, but
at least exactly ``Retry-After``), to show why the agent spreads its retries. For the
first ``--stall-s`` seconds the database is stalled (another session holds an exclusive lock
on ``ingested_batches``, as a failover, a restart or a long lock would): without a bound,
every request that arrives meanwhile is read, parsed and queued in memory. With a healthy
database the daemon's one event loop parses no faster than the writers store, and uvicorn
stops reading a connection whose body the app has not taken (64 KiB), so bodies do not pile
up: the bound is for when storage stalls.

Modes, interleaved over ``--rounds``: ``bounded`` (the default bound, 64 MiB of bodies per
process), ``unbounded`` (a bound no storm reaches) and, with ``--compare-retry``, ``lockstep``
(bounded, clients retrying exactly after ``Retry-After``). Prints, for each, the daemon's peak
RSS (``VmHWM``), the time until every bundle was stored, and the 503s. Also measures once
what a parsed body costs in memory against its size (the factor the bound's docs quote).
``--wire`` is the wire format of the bundles: 2 (what agents send; the default) or 1. With
``--merge`` each backlog goes as agents send it with ``agent.merge_backlog`` (the default):
ONE v2 batch merged from its batches by the agent's code (``gpuwatch/agent/merge.py``), not a
bundle.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path

import requests
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import drop_db, fresh_db, make_batches
from gpuwatch.agent import merge
from gpuwatch.agent.push import Backoff
from gpuwatch.daemon.ingest import checked_batch
from gpuwatch.sql.nodes import create_token
from gpuwatch.wire import v2 as wire_v2
from tests.daemon_process import DaemonProcess

UNBOUNDED = 64 * 2**30


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def bundles(agents: int, backlog: int, gpus: int, version: int, merged: bool = False) -> dict[str, bytes]:
    """Each agent's backlog as one request body: a bundle (one batch per line) or, ``merged``,
    one v2 batch holding the whole backlog."""
    batches = make_batches(agents, backlog, gpus, timedelta(0), 1)
    per_node: dict[str, list[bytes]] = {}
    for b in batches:
        per_node.setdefault(b.node, []).append(wire_v2.encode(b, 2 if merged else version))
    if merged:
        return {node: merge.encode(merge.merge(merge.parse(parts))) for node, parts in per_node.items()}
    return {node: b"\n".join(parts) for node, parts in per_node.items()}


def parsed_factor(body: bytes, node: str, version: int) -> float:
    """Bytes the parsed models of a bundle take, per byte of the bundle."""
    tracemalloc.start()
    parsed = [checked_batch(line, node, 300, version) for line in body.split(b"\n")]
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del parsed
    return size / len(body)


def retry_wait(backoff: Backoff, retry_after_s: float, spread: bool) -> float:
    """The agent's wait after a 503 with ``Retry-After`` (``Agent.retry_delay``, default config:
    backoff 1 s .. 300 s); ``spread=False``: exactly ``Retry-After`` at least, in lockstep."""
    floor = backoff.after(retry_after_s) if spread else retry_after_s
    return max(backoff.next_delay(), floor)


def storm(
    bodies: dict[str, bytes], bound: int, stall_s: float, spread: bool, version: int, merged: bool = False
) -> tuple[float, float, int]:
    """(peak RSS MiB, seconds until all stored, 503s) of one daemon process."""
    name, url, engine = fresh_db()
    tokens = {node: create_token(engine, node) for node in bodies}
    sheds = 0
    lock = threading.Lock()
    start = threading.Event()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            daemon = DaemonProcess(
                url, Path(tmp) / "daemon.log", env={"GPUWATCH_DAEMON__MAX_INFLIGHT_BYTES": str(bound)}
            )
            daemon.start()
            try:

                def agent(node: str) -> None:
                    nonlocal sheds
                    backoff = Backoff(1.0, 300.0, random.Random(node))
                    start.wait()
                    with requests.Session() as http:
                        while True:
                            r = http.post(
                                f"{daemon.url}/api/v{version}/ingest/{node}{'' if merged else '/bundle'}",
                                data=bodies[node],
                                headers={
                                    "Authorization": f"Bearer {tokens[node]}",
                                    "Content-Type": "application/json" if merged else "application/x-ndjson",
                                },
                                timeout=300,
                            )
                            if r.status_code != 503:
                                r.raise_for_status()
                                return
                            with lock:
                                sheds += 1
                            time.sleep(retry_wait(backoff, float(r.headers.get("Retry-After", 5)), spread))

                threads = [threading.Thread(target=agent, args=(n,)) for n in bodies]
                for t in threads:
                    t.start()
                locker = engine.connect()
                stall = locker.begin()
                locker.execute(sa.text("LOCK TABLE ingested_batches IN ACCESS EXCLUSIVE MODE"))
                t0 = time.perf_counter()
                start.set()
                time.sleep(stall_s)
                stall.commit()
                locker.close()
                for t in threads:
                    t.join()
                elapsed = time.perf_counter() - t0
                assert daemon.proc is not None
                peak = peak_rss_mib(daemon.proc.pid)
            finally:
                daemon.stop()
    finally:
        engine.dispose()
        drop_db(name)
    return peak, elapsed, sheds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=200)
    ap.add_argument("--backlog", type=int, default=64, help="batches per agent's bundle")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--stall-s", type=float, default=10.0, help="database stalled this long at the start")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--compare-retry", action="store_true", help="also clients retrying exactly after Retry-After"
    )
    ap.add_argument("--wire", type=int, choices=(1, 2), default=2, help="wire format of the bundles")
    ap.add_argument(
        "--merge", action="store_true", help="each backlog as one merged v2 batch (agent.merge_backlog)"
    )
    args = ap.parse_args()
    if args.merge:
        args.wire = 2
    bodies = bundles(args.agents, args.backlog, args.gpus, args.wire, args.merge)
    total = sum(map(len, bodies.values()))
    node, body = next(iter(bodies.items()))
    print(
        f"{args.agents} agents x one {'merged batch' if args.merge else 'bundle'} of {args.backlog} "
        f"one-cycle v{args.wire} batches "
        f"({args.gpus} GPUs): "
        f"{len(body) / 2**20:.2f} MiB each, {total / 2**20:.0f} MiB in all; a parsed body takes "
        f"{parsed_factor(body, node, args.wire):.1f}x its bytes; the database stalled for the first "
        f"{args.stall_s:g} s"
    )
    modes = {"bounded": (64 * 2**20, True), "unbounded": (UNBOUNDED, True)}
    if args.compare_retry:
        modes["lockstep"] = (64 * 2**20, False)
    results: dict[str, list[tuple[float, float, int]]] = {m: [] for m in modes}
    for round_no in range(1, args.rounds + 1):
        for mode, (bound, spread) in modes.items():
            peak, elapsed, sheds = storm(bodies, bound, args.stall_s, spread, args.wire, args.merge)
            results[mode].append((peak, elapsed, sheds))
            print(
                f"  round {round_no} {mode:>9}: peak RSS {peak:,.0f} MiB, all stored in {elapsed:.1f} s, ",
                end="",
            )
            print(f"{sheds} x 503")
    med = {m: tuple(statistics.median(r[i] for r in rs) for i in range(3)) for m, rs in results.items()}
    for mode, (peak, elapsed, sheds) in med.items():
        print(f"median {mode:>9}: peak RSS {peak:,.0f} MiB, {elapsed:.1f} s, {sheds:.0f} x 503")
    print(
        f"bounded / unbounded: peak RSS {med['bounded'][0] / med['unbounded'][0]:.2f}x, "
        f"time {med['bounded'][1] / med['unbounded'][1]:.2f}x"
    )
    if "lockstep" in med:
        lock_peak, lock_time, lock_sheds = med["lockstep"]
        peak, elapsed, sheds = med["bounded"]
        print(
            f"lockstep / bounded (spread retries): 503s {lock_sheds / max(sheds, 1):.2f}x, "
            f"time {lock_time / elapsed:.2f}x, peak RSS {lock_peak / peak:.2f}x"
        )


if __name__ == "__main__":
    main()
