"""``gpuwatch demo``: the whole product on one machine, no GPU, Slurm or database server.

What runs is the real pipeline: the daemon (FastAPI app + scheduler, on the configured
database, SQLite by default) in a thread, and one real :class:`~gpuwatch.agent.Agent` per
simulated node pushing batches over HTTP into it; then the per-minute rollups and the
classifier (the same functions the daemon's scheduler runs), and the low-utilization table.

What is simulated, and said so in the output:

* **GPUs**: the seeded device model of ``collectors/sim_backend.py`` (every GPU sample is
  stored with ``simulated = true``), one scenario per node, chosen so that each node shows
  one cause (:data:`PROFILES`);
* **the host and Slurm**: each node runs one Slurm-like job; the demo writes its
  ``slurm_jobs`` / ``job_gpus`` rows itself and a host collector produces CPU, memory,
  network and job-cgroup samples that match the cause (CPU saturated for input-bound,
  swapping for host-memory pressure, InfiniBand busy for communication-bound ...);
* **time**: the classifier needs whole rollup minutes and a grace period, so the agents run
  on a virtual clock: ``--cycles`` samples 10 virtual seconds apart, ending now, pushed as
  fast as the daemon takes them (``--interval`` adds real seconds between cycles). The
  demo's classifier thresholds are the defaults with ``grace_period_s = 0``.

``--serve`` then keeps the daemon, its web view and the agents (now on the real clock, one
sample per 10 s) running until Ctrl-C, with rollups every minute and the classifier every
30 s. Data of an earlier demo (nodes ``demo-*``, jobs ``99xxxx``) is removed at start so
re-runs on the same database do not mix; nothing else in the database is touched.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import click

from gpuwatch import wire
from gpuwatch.collectors.base import Collector
from gpuwatch.collectors.sim_host import HostProfile, host_samples
from gpuwatch.config import Settings
from gpuwatch.views import LowUtilFilters, LowUtilJob, low_util_jobs

#: virtual seconds between two samples of a simulated node
SAMPLE_S = 10.0
DEFAULT_CYCLES = 90  # 15 virtual minutes: a whole 10-minute recent window plus the job window
DEFAULT_NODES = 12
JOB_BASE = 990000
NODE_PREFIX = "demo-"


#: the demo job's host profile (shared with the classifier corpus)
Host = HostProfile


@dataclass(frozen=True)
class Profile:
    """One simulated node and its job: the cause it is meant to show and how."""

    cause: str
    job_name: str
    user: str
    scenario: str  # a sim_backend spec ("training,gpu2=xid") or a key of CUSTOM_SCENARIOS
    gpus: int = 4
    model: str = "H200"
    seed: int = 0
    host: Host = field(default_factory=Host)


def _custom_scenarios() -> dict[str, Any]:
    from gpuwatch.collectors import sim_backend as sim

    return {
        # a training step every 15 s, stalled the rest of the time while the job swaps
        "swap-stall": sim.DutyCycle(
            on=sim.TRAINING, off=sim.Activity(memory_used=0.4, power=0.06, sm_clock=0.9), period_s=15, on_s=3
        ),
        # rare small kernels, memory moderate, host calm: nothing explains the low use
        "sparse": sim.Steady(
            sim.Activity(
                util_gpu=0.08,
                util_memory=0.03,
                sm_active=0.06,
                sm_occupancy=0.3,
                tensor_active=0.02,
                dram_active=0.03,
                fp32_active=0.03,
                memory_used=0.5,
                power=0.15,
            )
        ),
    }


#: one node per cause, most common first (so a small ``--nodes`` still shows the usual ones)
PROFILES: tuple[Profile, ...] = (
    Profile("idle_allocation", "jupyter", "alice", "idle", seed=1, host=Host(cpu_used=0.2)),
    Profile(
        "input_bound",
        "resnet50-imagenet",
        "bob",
        "input-bound",
        seed=51,
        host=Host(cpu_alloc=8, cpu_used=8, iowait=0.005),
    ),
    Profile("no_mixed_precision", "bert-fp32", "carol", "no-amp", seed=81),
    Profile("small_work", "mlp-sweep-17", "dave", "small-batch", gpus=1, seed=71),
    Profile(
        "communication_bound",
        "llama-ddp",
        "erin",
        "comm-bound",
        gpus=8,
        seed=61,
        host=Host(cpu_alloc=16, cpu_used=8),
    ),
    Profile("gpu_memory_pressure", "vit-huge", "frank", "memory-pressure", seed=31),
    Profile(
        "host_memory_pressure",
        "dataset-in-ram",
        "grace",
        "swap-stall",
        seed=41,
        host=Host(cpu_used=2, job_memory_ratio=0.995, swap_bytes_per_s=5e7, memory_pressure=0.3, iowait=0.05),
    ),
    Profile(
        "cpu_only",
        "sklearn-on-gpu-node",
        "heidi",
        "idle",
        gpus=1,
        seed=11,
        host=Host(cpu_alloc=8, cpu_used=7.5),
    ),
    Profile("throttled", "gpt-pretrain", "ivan", "throttled", seed=91),
    Profile("gpu_fault", "diffusion-train", "judy", "training,gpu2=xid", seed=21),
    Profile("unknown_low", "rl-env-sim", "mallory", "sparse", gpus=2, seed=101),
    Profile("healthy", "llm-finetune", "oscar", "training", seed=111),
)


def job_id(index: int) -> str:
    return str(JOB_BASE + index + 1)


def node_name(index: int) -> str:
    return f"{NODE_PREFIX}node{index + 1:02d}"


# ---------------------------------------------------------------------------- virtual time


class VirtualClock:
    """The agent's ``clock``/``sleep``/``now`` for one simulated node.

    Virtual mode: the sample loop's sleeps advance virtual time at once (plus ``pace_s`` of
    real time), so ``cycles`` samples 10 s apart are taken in a moment. Live mode (``--serve``
    after the backfill): the real clocks. The sender thread's back-off always waits for real.
    """

    def __init__(self, start: datetime, pace_s: float = 0.0) -> None:
        self.start = start
        self.pace_s = pace_s
        self.t = SAMPLE_S  # the first sample covers [start, start + 10 s], like the sim backend
        self.live = False
        self.sampler: threading.Thread | None = None

    def monotonic(self) -> float:
        return time.monotonic() if self.live else self.t

    def sleep(self, stop: threading.Event, seconds: float) -> bool:
        if self.live or threading.current_thread() is not self.sampler:
            return stop.wait(max(0.0, min(seconds, 2.0) if not self.live else seconds))
        self.t += seconds
        return stop.wait(self.pace_s) if self.pace_s > 0 else stop.is_set()

    def now(self) -> datetime:
        return datetime.now(timezone.utc) if self.live else self.start + timedelta(seconds=self.t)


# ---------------------------------------------------------------------------- the host


class DemoHostCollector(Collector):
    """CPU, memory, NIC, InfiniBand, job-cgroup and attribution samples for one demo job."""

    name = "demo-host"

    def __init__(self, profile: Profile, jid: str, seed: int) -> None:
        self.profile = profile
        self.job_id = jid
        self.rng = random.Random(seed)

    def collect(self, now: datetime) -> list:
        out = host_samples(self.profile.host, self.job_id, now, self.rng)
        jid = self.job_id
        out.extend(
            wire.AttributionSample(
                ts=now, gpu_index=i, job_id=jid, user=self.profile.user, uid=1000 + i, source="prolog"
            )
            for i in range(self.profile.gpus)
        )
        return out


# ---------------------------------------------------------------------------- database


def _forget_previous_demo(engine, names: Sequence[str], job_ids: Sequence[str]) -> None:  # type: ignore[no-untyped-def]
    """Remove an earlier demo's rows (same node names and job ids) so runs never mix."""
    import sqlalchemy as sa

    from gpuwatch.sql.schema import (
        PARTITIONED_TABLES,
        ROLLUP_TABLES,
        job_gpus,
        nodes,
        slurm_jobs,
        verdicts,
    )

    with engine.begin() as conn:
        ids = list(conn.execute(sa.select(nodes.c.id).where(nodes.c.name.in_(names))).scalars())
        if ids:
            for table in (*PARTITIONED_TABLES, *ROLLUP_TABLES):
                conn.execute(table.delete().where(table.c.node_id.in_(ids)))
        conn.execute(verdicts.delete().where(verdicts.c.job_id.in_(job_ids)))
        conn.execute(job_gpus.delete().where(job_gpus.c.job_id.in_(job_ids)))
        conn.execute(slurm_jobs.delete().where(slurm_jobs.c.job_id.in_(job_ids)))


def _insert_jobs(engine, jobs: Sequence[tuple[str, str, Profile]], start: datetime) -> None:  # type: ignore[no-untyped-def]
    from gpuwatch.sql.schema import job_gpus, slurm_jobs

    rows, gpu_rows = [], []
    for jid, node, p in jobs:
        rows.append(
            {
                "job_id": jid,
                "source": "squeue",
                "name": p.job_name,
                "user_name": p.user,
                "uid": 1000,
                "account": "demo-lab",
                "partition": "gpu",
                "state": "RUNNING",
                "submit_at": start - timedelta(minutes=1),
                "start_at": start,
                "end_at": None,
                "time_limit_s": 86400,
                "nodes": [node],
                "cpus": int(p.host.cpu_alloc),
                "memory_bytes": p.host.job_memory_limit,
                "gpus": p.gpus,
                "first_seen_at": start,
                "updated_at": start,
            }
        )
        gpu_rows += [{"job_id": jid, "node": node, "gpu_index": i} for i in range(p.gpus)]
    with engine.begin() as conn:
        conn.execute(slurm_jobs.insert(), rows)
        conn.execute(job_gpus.insert(), gpu_rows)


# ---------------------------------------------------------------------------- the run


@dataclass
class DemoResult:
    url: str
    rows: list[LowUtilJob]  # the low-utilization listing of the demo's jobs
    expected: dict[str, str]  # job id -> the cause its node was made to show
    seconds: float
    #: when the demo's classifier ran (the evaluation time of every verdict)
    evaluated_at: datetime | None = None


def _port_free(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _daemon_settings(settings: Settings, serve: bool) -> Settings:
    """The demo daemon: on the configured port with ``--serve`` (if free), else any free port."""
    d = settings.daemon
    listen = d.listen if serve and _port_free(d.host, d.port) else "127.0.0.1:0"
    return settings.with_overrides(
        daemon={"listen": listen},
        classify={"grace_period_s": 0.0, "evaluate_interval_s": 30.0},
    )


def run_demo(
    settings: Settings,
    *,
    node_count: int | None = None,
    cycles: int | None = None,
    interval_s: float | None = None,
    serve: bool = False,
    echo: Callable[[str], None] = click.echo,
    stop: threading.Event | None = None,
) -> DemoResult:
    """Run the demo; with ``serve`` keep everything up until ``stop`` is set (Ctrl-C)."""
    if (node_count, cycles, interval_s) == (3, 5, 1.0):
        # the defaults of the older `demo` command in cli/main.py: too short for any verdict
        node_count = cycles = interval_s = None
    node_count = DEFAULT_NODES if node_count is None else max(1, node_count)
    cycles = DEFAULT_CYCLES if cycles is None else max(1, cycles)
    pace = 0.0 if interval_s is None else max(0.0, interval_s)

    from gpuwatch.agent import Agent, Pusher, Spool
    from gpuwatch.classify.runner import evaluate_running
    from gpuwatch.cli.jobs import render_low_util
    from gpuwatch.cli.render import OutputFormat
    from gpuwatch.collectors.gpu import GpuCollector
    from gpuwatch.collectors.sim_backend import SimulatedBackend
    from gpuwatch.daemon.server import BackgroundServer
    from gpuwatch.sql.nodes import create_token
    from gpuwatch.sql.rollups import Rollup, floor_minute

    started = time.monotonic()
    daemon_settings = _daemon_settings(settings, serve)
    thresholds = daemon_settings.classify
    stop = stop or threading.Event()
    end = datetime.now(timezone.utc)
    vstart = end - timedelta(seconds=SAMPLE_S * cycles)
    echo(f"database: {settings.database.url}")
    # the scheduler waits until the backfill is classified: on the real clock, a pass over
    # half-sent virtual minutes would store verdicts of a job that is not all there yet
    server_cm = BackgroundServer(daemon_settings, schedule=False)
    server = server_cm.__enter__()
    custom = _custom_scenarios()
    jobs = [(job_id(i), node_name(i), PROFILES[i % len(PROFILES)]) for i in range(node_count)]
    agents: list[tuple[Agent, VirtualClock]] = []
    spool_root = tempfile.mkdtemp(prefix="gpuwatch-demo-")
    try:
        echo(f"daemon:   {server.url}  (every GPU below is SIMULATED; samples stored with simulated=true)")
        echo(
            f"time:     simulated — {cycles} samples per node, {SAMPLE_S:.0f} virtual s apart "
            f"({cycles * SAMPLE_S / 60:.0f} virtual minutes ending now), pushed as fast as possible"
        )
        echo("classify: demo thresholds = defaults with grace_period_s = 0")
        _forget_previous_demo(server.engine, [n for _, n, _ in jobs], [j for j, _, _ in jobs])
        _insert_jobs(server.engine, jobs, vstart)
        for i, (jid, node, p) in enumerate(jobs):
            token = create_token(server.engine, node)
            clock = VirtualClock(vstart, pace)
            node_settings = settings.with_overrides(
                agent={
                    "node": node,
                    "daemon_url": server.url,
                    "token": token,
                    "interval_s": SAMPLE_S,
                    "spool_dir": Path(spool_root) / node,
                },
            )
            scenario = custom.get(p.scenario, p.scenario)
            backend = SimulatedBackend(
                scenario, gpus=p.gpus, seed=p.seed * 101 + i, model=p.model, interval_s=SAMPLE_S, start=vstart
            )
            collectors = [GpuCollector(backend), DemoHostCollector(p, jid, seed=p.seed * 7 + i)]
            spool = Spool(node_settings.agent.spool_dir, node_settings.agent.spool_max_bytes)
            pusher = Pusher(server.url, node, token, node_settings.agent.push_timeout_s)
            agent = Agent(
                node_settings,
                collectors,
                spool=spool,
                pusher=pusher,
                clock=clock.monotonic,
                sleep=clock.sleep,
                now=clock.now,
            )
            agents.append((agent, clock))
            echo(
                f"agent:    {node}  job {jid} ({p.user}/{p.job_name}), {p.gpus}x {p.model} sim '{p.scenario}'"
            )

        def backfill(agent: Agent, clock: VirtualClock) -> None:
            clock.sampler = threading.current_thread()
            agent.run(stop, max_cycles=cycles)

        threads = [threading.Thread(target=backfill, args=pair, daemon=True) for pair in agents]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for agent, _ in agents:
            if not agent.drain(120):
                echo(f"warning: {agent.config.node} did not send everything in 120 s")
        stored = sum(a.sent_batches for a, _ in agents)
        echo(f"ingest:   {stored} batches over HTTP in {time.monotonic() - started:.1f} s")

        # the scheduler's own jobs, run now rather than on their next tick
        last = vstart + timedelta(seconds=SAMPLE_S * cycles)
        report = Rollup(server.engine).run_once(now=floor_minute(last) + timedelta(minutes=2))
        evaluate_running(server.engine, last, thresholds)
        echo(f"rollup:   done until {report.done_until:%H:%M} UTC; classified {len(jobs)} job(s)")
        rows = low_util_jobs(server.engine, LowUtilFilters(job_ids=tuple(j for j, _, _ in jobs)), now=last)
        echo("")
        echo(render_low_util(rows, OutputFormat.TABLE, "low-utilization jobs (simulated)"))
        flagged = {r.job_id for r in rows}
        healthy = [j for j, _, p in jobs if p.cause == "healthy" and j not in flagged]
        if healthy:
            echo(f"healthy (not listed): {', '.join(healthy)}")
        echo("")
        if serve:
            echo(f"web view: {server.url}/   (job page: {server.url}/jobs/{jobs[0][0]})")
            echo("serving: agents now sample on the real clock every 10 s; Ctrl-C to stop")
            server.start_scheduler()
            live = []
            for agent, clock in agents:
                clock.live = True
                t = threading.Thread(target=agent.run, args=(stop,), daemon=True)
                t.start()
                live.append(t)
            while not stop.wait(0.5):
                pass
            for t in live:
                t.join(timeout=5)
        else:
            echo(f"web view: run `scripts/demo --serve` and open http://{settings.daemon.listen}/")
        elapsed = time.monotonic() - started
        echo(f"done in {elapsed:.0f} s")
        return DemoResult(server.url, rows, {j: p.cause for j, _, p in jobs}, elapsed, last)
    finally:
        stop.set()
        for agent, _ in agents:
            agent.close()
        server_cm.__exit__(None, None, None)
        server.engine.dispose()
        shutil.rmtree(spool_root, ignore_errors=True)


# ---------------------------------------------------------------------------- the command


@click.command("demo")
@click.option(
    "--nodes",
    "node_count",
    default=DEFAULT_NODES,
    show_default=True,
    help=f"Simulated nodes, one job each; the first {len(PROFILES)} show one cause each.",
)
@click.option(
    "--cycles",
    default=DEFAULT_CYCLES,
    show_default=True,
    help=f"Samples per node, {SAMPLE_S:.0f} virtual seconds apart, ending now.",
)
@click.option(
    "--interval", default=0.0, show_default=True, help="Real seconds between cycles (0: as fast as possible)."
)
@click.option("--serve", is_flag=True, help="Keep the daemon, web view and agents running until Ctrl-C.")
@click.pass_context
def demo_command(ctx: click.Context, node_count: int, cycles: int, interval: float, serve: bool) -> None:
    """Run the whole pipeline on this machine: daemon on SQLite, simulated GPUs, jobs of every cause."""
    import logging

    from gpuwatch.logs import setup_logging

    obj = ctx.obj
    setup_logging(obj.log_level, json_lines=False)
    logging.getLogger().setLevel(logging.WARNING)
    stop = threading.Event()
    if serve:
        import signal

        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    run_demo(obj.settings, node_count=node_count, cycles=cycles, interval_s=interval, serve=serve, stop=stop)


def register(cli: click.Group) -> None:
    """Add (or replace) ``gpuwatch demo`` on ``cli``."""
    cli.add_command(demo_command, "demo")
