"""A large cluster's steady state against ONE daemon process, in real time: does it keep up?

    .venv/bin/python bench/steady_load.py [--nodes 10000] [--interval 10] [--push-every N]
                                          [--seconds 180] [--warmup 30] [--baseline TREE]

Makes a throwaway database on the PostgreSQL server at 127.0.0.1:5432 (or
$GPUWATCH_BENCH_PG), registers ``--nodes`` nodes, starts one ``gpuwatch daemon`` process
(``daemon.workers = 1``, its scheduler running as in production: rollups, classification) and
sends, in real time, what that many agents send at ``agent.interval_s = --interval`` and
``agent.push_every`` (default: the agent's default): each node one merged batch of its last
``push_every`` cycles (8 GPUs with 2 processes each + host samples per cycle, the same rows as
``bench/ingest.py``) every ``push_every * interval`` seconds, the nodes spread evenly over
that period, as agents started at different times are. 10,000 nodes at 10 s offer 1,000
node-cycles/s whatever ``push_every`` is; it changes how many requests carry them.

Printed after ``--warmup`` seconds (not counted: the first look-ups, the day's partitions):
offered vs stored node-cycles/s; how late requests went out against their schedule (the
client's threads wait for answers, so a daemon that cannot keep up shows as lateness that
grows, and as batches due but not sent at the end: the backlog); the daemon's CPU and its
database backends' CPU per node-cycle (``/proc``, the backends read every 0.5 s so that one
closed meanwhile still counts; the daemon's includes its scheduler's jobs,
the per-minute rollups of every node and the classifier, as in production; the server's shared
background processes, and anything else on the machine, are not counted); and this client's
own CPU, which shares the same cores. ``--baseline TREE`` runs the same load, in alternating
rounds, against the daemon of another source tree (``git archive <commit> | tar -x -C TREE``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.agent_vs_node_exporter import cpu_seconds, tree_cpu_seconds
from bench.ingest import drop_db, fresh_db, make_batches
from gpuwatch.agent import merge
from gpuwatch.clock import utcnow
from gpuwatch.config.settings import AgentConfig
from gpuwatch.sql.nodes import TOKEN_PREFIX
from gpuwatch.wire import v2 as wire_v2
from tests import factories

NAME = "steady{:05d}"
#: the node name of a template body (``make_batches``), replaced by each request's node
TEMPLATE_NODE = b'"bench0000"'


@dataclass
class Tally:
    """What one client thread saw, counted after the warm-up."""

    sent: int = 0
    cycles: int = 0
    late_s: list[tuple[float, float]] = field(default_factory=list)  # (due, seconds late)
    failures: int = 0
    unsent: int = 0  # due before the end, not yet sent then (the client was behind)
    in_flight: int = 0  # sent before the end, answered after it


class Bodies:
    """One merged body per push period (every node's window of cycles shares its stamps); a
    request's body is that template with its node's name and a fresh batch id put in."""

    def __init__(self, push_every: int, interval_s: float, gpus: int) -> None:
        self.push_every = push_every
        self.interval_s = interval_s
        self.gpus = gpus
        self.start = utcnow() - timedelta(hours=1)  # the stamps lag the clock: never "from the future"
        self._templates: dict[int, tuple[bytes, bytes]] = {}
        self._lock = threading.Lock()

    def body(self, node: str, period: int) -> bytes:
        with self._lock:
            if period not in self._templates:
                self._templates[period] = self._template(period)
            template, batch_id = self._templates[period]
        new_id = str(uuid.uuid4()).encode()
        return template.replace(batch_id, new_id).replace(TEMPLATE_NODE, f'"{node}"'.encode())

    def _template(self, period: int) -> tuple[bytes, bytes]:
        """The merged batch of ``push_every`` cycles of period ``period``, as an agent sends it."""
        first = self.start + timedelta(seconds=period * self.push_every * self.interval_s)
        # make_batches stamps its cycles from "now - 1 h + shift"
        batches = make_batches(1, self.push_every, self.gpus, first - (utcnow() - timedelta(hours=1)))
        merged = merge.merge(merge.parse([wire_v2.encode(b, 2) for b in batches]))
        return merge.encode(merged), str(merged.batch_id).encode()


def register(engine: sa.Engine, count: int) -> dict[str, str]:
    """``count`` nodes with a token each, in one statement (node name -> token)."""
    return factories.register_nodes(
        engine, {NAME.format(n): f"{TOKEN_PREFIX}steady-{n}" for n in range(count)}
    )


def backend_cpu(engine: sa.Engine, database: str) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend connected to ``database`` (pid -> seconds)."""
    with engine.connect() as conn:
        pids = conn.execute(
            sa.text("SELECT pid FROM pg_stat_activity WHERE datname = :db AND pid <> pg_backend_pid()"),
            {"db": database},
        ).scalars()
        out = {}
        for pid in pids:
            with contextlib.suppress(OSError):  # gone since the query
                out[pid] = cpu_seconds(pid)
    return out


class BackendCpu:
    """The database's backends' CPU over a span, read every ``every_s``: a backend that exits
    meanwhile (a pool's overflow connection closed) keeps what it had used at its last reading,
    so at most ``every_s`` of its CPU is missed."""

    def __init__(self, engine: sa.Engine, database: str, every_s: float = 0.5) -> None:
        self.engine, self.database, self.every_s = engine, database, every_s
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.first = backend_cpu(self.engine, self.database)
        self.last = dict(self.first)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.last.update(backend_cpu(self.engine, self.database))

    def stop(self) -> float:
        """CPU seconds the backends used since :meth:`start`."""
        self._stop.set()
        self._thread.join()
        self.last.update(backend_cpu(self.engine, self.database))
        return sum(s - self.first.get(pid, 0.0) for pid, s in self.last.items())


def run_round(args: argparse.Namespace, source: Path | None) -> dict[str, float]:
    """One steady load against a fresh database and daemon; the figures of the counted part."""
    import tempfile

    import requests

    from tests.daemon_process import DaemonProcess

    name, url, engine = fresh_db()
    try:
        tokens = register(engine, args.nodes)
        names = list(tokens)
        period_s = args.push_every * args.interval
        bodies = Bodies(args.push_every, args.interval, args.gpus)
        with tempfile.TemporaryDirectory() as tmp:
            daemon = DaemonProcess(
                url, Path(tmp) / "daemon.log", env={"GPUWATCH_DAEMON__WORKERS": "1"}, source=source
            )
            daemon.start()
            try:
                t0 = time.monotonic() + 1.0
                counted_from = t0 + args.warmup
                end = counted_from + args.seconds
                tallies = [Tally() for _ in range(args.threads)]
                marks: dict[str, float] = {}
                backends = BackendCpu(engine, name)

                def client(index: int) -> None:
                    tally = tallies[index]
                    mine = range(index, args.nodes, args.threads)
                    with requests.Session() as http:
                        period = 0
                        while True:
                            for n in mine:
                                due = t0 + period * period_s + n * period_s / args.nodes
                                if due >= end:
                                    return
                                wait = due - time.monotonic()
                                if wait > 0:
                                    time.sleep(wait)
                                late = max(0.0, -wait)
                                if due >= counted_from and due + late > end:
                                    tally.unsent += 1  # due before the end, its turn after it: a backlog
                                    continue
                                node = names[n]
                                body = bodies.body(node, period)
                                r = http.post(
                                    f"{daemon.url}/api/v2/ingest/{node}",
                                    data=body,
                                    headers={
                                        "Authorization": f"Bearer {tokens[node]}",
                                        "Content-Type": "application/json",
                                    },
                                )
                                if due < counted_from:
                                    continue
                                if time.monotonic() > end:  # in flight at the end: not counted
                                    tally.in_flight += 1
                                    continue
                                tally.late_s.append((due - counted_from, late))
                                if r.status_code == 200 and r.json()["status"] == "stored":
                                    tally.sent += 1
                                    tally.cycles += args.push_every
                                else:
                                    tally.failures += 1
                            period += 1

                def measure(key: str) -> None:
                    time.sleep(max(0.0, counted_from - time.monotonic()))
                    marks[f"{key}_daemon"] = tree_cpu_seconds(daemon.proc.pid)
                    marks[f"{key}_client"] = cpu_seconds(os.getpid())
                    marks[f"{key}_wall"] = time.monotonic()
                    backends.start()

                threads = [
                    threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.threads)
                ]
                for t in threads:
                    t.start()
                measure("start")
                time.sleep(max(0.0, end - time.monotonic()))
                stop_daemon = tree_cpu_seconds(daemon.proc.pid)
                stop_client = cpu_seconds(os.getpid())
                stop_wall = time.monotonic()
                pg = backends.stop()
                for t in threads:
                    t.join(timeout=60)
                unsent = sum(t.unsent for t in tallies)
            finally:
                daemon.stop()
    finally:
        engine.dispose()
        drop_db(name)
    wall = stop_wall - marks["start_wall"]
    cycles = sum(t.cycles for t in tallies)
    late = sorted((due, s) for t in tallies for due, s in t.late_s)
    first = [s for due, s in late if due < args.seconds / 3]
    last = [s for due, s in late if due >= 2 * args.seconds / 3]
    return {
        "offered": args.nodes / args.interval,
        "stored": cycles / wall,
        "requests": sum(t.sent for t in tallies) / wall,
        "failures": sum(t.failures for t in tallies),
        "unsent": unsent,
        "in_flight": sum(t.in_flight for t in tallies),
        "late_first_p50": statistics.median(first) if first else 0.0,
        "late_last_p50": statistics.median(last) if last else 0.0,
        "late_last_max": max(last, default=0.0),
        "daemon_ms": 1000 * (stop_daemon - marks["start_daemon"]) / max(cycles, 1),
        "pg_ms": 1000 * pg / max(cycles, 1),
        "client_ms": 1000 * (stop_client - marks["start_client"]) / max(cycles, 1),
        "daemon_cores": (stop_daemon - marks["start_daemon"]) / wall,
        "pg_cores": pg / wall,
    }


def show(label: str, r: dict[str, float]) -> None:
    held = r["stored"] >= 0.98 * r["offered"] and r["late_last_p50"] < 1.0 and r["unsent"] == 0
    print(
        f"  {label}: offered {r['offered']:,.0f} node-cycles/s, stored {r['stored']:,.0f} "
        f"({r['requests']:,.1f} requests/s), {r['failures']:.0f} failed; lateness p50 first third "
        f"{r['late_first_p50']:.2f} s, last third {r['late_last_p50']:.2f} s "
        f"(max {r['late_last_max']:.2f} s), "
        f"{r['unsent']:.0f} due but not yet sent at the end (backlog), {r['in_flight']:.0f} in flight\n"
        f"      CPU per node-cycle: daemon {r['daemon_ms']:.3f} ms ({r['daemon_cores']:.2f} cores), "
        f"PostgreSQL backends {r['pg_ms']:.3f} ms ({r['pg_cores']:.2f} cores), this client "
        f"{r['client_ms']:.3f} ms -> {'HELD' if held else 'NOT HELD: the backlog grows'}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--interval", type=float, default=AgentConfig.model_fields["interval_s"].default)
    ap.add_argument("--push-every", type=int, default=AgentConfig.model_fields["push_every"].default)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=180.0, help="counted seconds of steady load")
    ap.add_argument("--warmup", type=float, default=30.0, help="seconds sent before counting")
    ap.add_argument("--threads", type=int, default=32, help="client threads (each waits for its answers)")
    ap.add_argument("--baseline", type=Path, help="another source tree's daemon, in alternating rounds")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    print(
        f"{args.nodes:,} nodes x {args.gpus} GPUs, interval_s {args.interval:g}, "
        f"push_every {args.push_every} "
        f"(a merged batch of {args.push_every} cycles per node every {args.push_every * args.interval:g} s), "
        f"one daemon process, PostgreSQL on this host"
    )
    sources: list[tuple[str, Path | None]] = [("this tree", None)]
    if args.baseline is not None:
        sources.append(("baseline", args.baseline))
    for round_no in range(1, args.rounds + 1):
        for label, source in sources:
            show(f"round {round_no}, {label}", run_round(args, source))


if __name__ == "__main__":
    main()
