"""Minutes from the start of GPU waste to the alert that names it, through the whole pipeline.

    .venv/bin/python bench/alert_latency.py [--json] [--minutes 85] [--restart-at 40] [--db URL]

One simulated node per scenario runs a real :class:`~gpuwatch.agent.Agent` (simulated GPUs,
a host that matches the job) pushing over HTTP into the real daemon (its app on SQLite by
default); the daemon's own scheduler jobs (``daemon/scheduler.py``: rollups, classification,
alert rules and the outbox worker, each on its own trigger) run at the virtual times their
triggers give, and the notices go to a local Slack-webhook stand-in and a local SMTP server.
Time is virtual: ``--minutes`` of cluster time end a few minutes before now (the daemon refuses
samples from the future), and take well under a minute of real time per hour simulated.
Thresholds, rules and schedules are the code's defaults; only the channels are configured.

``--restart-at M`` replaces the scheduler and everything it holds (the alert service, the
rollup's state, the leader lock) at minute M, as a daemon restart would: notices must still go
out once per job and cause.

Per scenario it prints ``{"scenario", "cause", "minutes_to_alert", ...}``: the cause of the first
notice delivered about the scenario's job and the minutes from the start of its waste (the job
start for waste from the start) to that delivery. The goal (issue: alerts within minutes):
every scenario alerted with its expected cause within 15 minutes of the waste starting (waste
from the start: within the classifier's grace period + 15), and the healthy control never.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email import message_from_bytes, policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SAMPLE_S = 10.0
#: virtual time zero (jobs start 20 s into its minute)
START = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)
#: each scenario's job starts this much after the previous one, so their waste begins at
#: different points of the minute and of the classifier's 2-minute grid
PHASE_S = 37.0
GOAL_MINUTES = 15.0
#: the scheduler's jobs this drives; partitions and retention do not change what is alerted
DRIVEN_JOBS = ("rollup", "classify", "alerts-rules", "alerts-send")


@dataclass(frozen=True)
class Scenario:
    """One node, one job: what its GPUs do and when the waste starts (None: never)."""

    name: str
    gpu: str  # a sim_backend spec: "idle", "training,gpu3=idle", ...
    expected: str | None
    waste_at_s: float | None
    gpus: int = 4
    #: GPU index -> a switch from training to idle at this many seconds into the job
    idle_after_s: dict[int, float] = field(default_factory=dict)
    host: dict[str, float] = field(default_factory=dict)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("4 GPUs idle from start", "idle", "idle_allocation", 0.0, host={"cpu_used": 0.2}),
    Scenario("1 of 4 idle from start", "training,gpu3=idle", "idle_allocation", 0.0),
    Scenario(
        "4 GPUs idle after 10 min busy",
        "training",
        "idle_allocation",
        600.0,
        idle_after_s={i: 600.0 for i in range(4)},
    ),
    Scenario(
        "4 GPUs idle after 60 min busy",
        "training",
        "idle_allocation",
        3600.0,
        idle_after_s={i: 3600.0 for i in range(4)},
    ),
    Scenario("1 of 4 idle after 10 min busy", "training", "idle_allocation", 600.0, idle_after_s={3: 600.0}),
    Scenario(
        "input-bound from start", "input-bound", "input_bound", 0.0, host={"cpu_used": 8.0, "iowait": 0.005}
    ),
    Scenario("healthy control", "training", None, None),
)


# ------------------------------------------------------------------------------ local sinks
class WebhookSink:
    """A Slack incoming-webhook stand-in: records each POSTed JSON body with the virtual time."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self.received: list[tuple[datetime, dict[str, Any]]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                sink.received.append((clock(), json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T0/B0/X"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class SmtpSink:
    """aiosmtpd on a free port, recording each message with the virtual time."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        from aiosmtpd.controller import Controller

        self.received: list[tuple[datetime, Any]] = []
        sink = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                sink.received.append((clock(), message_from_bytes(envelope.content, policy=policy.default)))
                return "250 OK"

        import socket

        with socket.socket() as probe:  # aiosmtpd needs a port it can name before it serves
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def close(self) -> None:
        self.controller.stop()


# ------------------------------------------------------------------------------ the run
class VirtualTime:
    """The one clock of the run: agents stamp samples with it, scheduled jobs take it as now."""

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.t = 0.0

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.t)

    def monotonic(self) -> float:
        return self.t

    def sleep(self, stop: threading.Event, seconds: float) -> bool:  # the sender's back-off: real time
        return stop.wait(min(seconds, 1.0))


@dataclass
class Outcome:
    scenario: str
    expected: str | None
    cause: str | None
    minutes_to_alert: float | None
    goal_minutes: float | None
    #: job notices delivered about the job: (cause, recipient) per notice
    notices: list[tuple[str, str]]

    @property
    def ok(self) -> bool:
        if self.expected is None:
            return self.cause is None
        return (
            self.cause == self.expected
            and self.minutes_to_alert is not None
            and self.goal_minutes is not None
            and self.minutes_to_alert <= self.goal_minutes
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "cause": self.cause,
            "minutes_to_alert": None if self.minutes_to_alert is None else round(self.minutes_to_alert, 2),
            "expected": self.expected,
            "goal_minutes": self.goal_minutes,
            "ok": self.ok,
            "notices": len(self.notices),
        }


@dataclass
class Run:
    outcomes: list[Outcome]
    webhook_posts: int
    emails: int
    sent_rows: int
    real_seconds: float
    #: (virtual time, job id, cause, channel, recipient, subject) of every job notice sent
    sent: list[tuple[datetime, str, str, str, str, str]]
    #: the first email (subject, payload) and Slack payload about the first scenario's job
    example: tuple[str, dict[str, Any], dict[str, Any]] | None = None
    #: scenario name -> the text of the first email about its job
    first_emails: dict[str, str] = field(default_factory=dict)

    def docs_section(self) -> str:
        """docs/alerts.md's generated examples: what was sent about the first scenario's job."""
        from gpuwatch.alerts import docs

        if self.example is None:
            raise RuntimeError("no email and Slack notice about the first scenario to show")
        return docs.examples_markdown(*self.example)


def _scheduler_jobs(server: Any) -> dict[str, Any]:
    return {job.id: job for job in server.scheduler.get_jobs() if job.id in DRIVEN_JOBS}


def _next_fires(jobs: dict[str, Any], now: datetime) -> dict[str, datetime]:
    out = {}
    for job_id, job in jobs.items():
        first = getattr(job, "next_run_time", None)
        out[job_id] = (
            first if first is not None and first > now else job.trigger.get_next_fire_time(None, now)
        )
    return out


def run(
    scenarios: tuple[Scenario, ...] = SCENARIOS,
    *,
    minutes: float = 85.0,
    restart_at_min: float | None = None,
    db_url: str | None = None,
    log: Callable[[str], None] = lambda _line: None,
) -> Run:
    """Simulate ``minutes`` of the cluster; each scenario's first delivered notice and its latency."""
    import sqlalchemy as sa

    from gpuwatch.agent import Agent, Pusher, Spool
    from gpuwatch.cli.demo import DemoHostCollector, Host, Profile
    from gpuwatch.collectors import sim_backend as sim
    from gpuwatch.collectors.gpu import GpuCollector
    from gpuwatch.config import Settings, load_settings
    from gpuwatch.daemon.server import BackgroundServer
    from gpuwatch.sql.nodes import create_token
    from gpuwatch.sql.schema import alert_outbox, job_gpus, slurm_jobs

    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="gpuwatch-alert-latency-"))
    real_now = datetime.now(timezone.utc)
    # a fixed start makes every run send the same messages (docs/alerts.md shows them); a run
    # must end before now (the daemon refuses samples from the future)
    vstart = START if START + timedelta(minutes=minutes + 5) < real_now else None
    vstart = vstart or (real_now - timedelta(minutes=minutes + 5)).replace(second=0, microsecond=0)
    job_start = vstart + timedelta(seconds=20)  # the first job; each next one PHASE_S later
    clock = VirtualTime(vstart)
    webhook, smtp = WebhookSink(clock.now), SmtpSink(clock.now)
    url = db_url or f"sqlite:///{workdir / 'gpuwatch.db'}"
    settings: Settings = load_settings(
        None,
        database={"url": url},
        daemon={"listen": "127.0.0.1:0"},
        alerts={
            "enabled": True,
            "user_email_pattern": "{user}@example.edu",
            "slack": {"webhook_url": webhook.url},
            "email": {"host": "127.0.0.1", "port": smtp.port, "from_address": "gpuwatch@example.edu"},
        },
    )
    server = BackgroundServer(settings, clock=clock.now, schedule=False).__enter__()
    agents: list[Agent] = []
    stop = threading.Event()
    try:
        ids = {s.name: str(880001 + i) for i, s in enumerate(scenarios)}
        starts = {s.name: job_start + timedelta(seconds=PHASE_S * i) for i, s in enumerate(scenarios)}
        with server.engine.begin() as conn:
            for i, s in enumerate(scenarios):
                node = f"lat-{i + 1:02d}"
                conn.execute(
                    slurm_jobs.insert().values(
                        job_id=ids[s.name],
                        source="squeue",
                        name=s.name.replace(" ", "-"),
                        user_name=f"user{i + 1}",
                        account="lab",
                        partition="gpu",
                        state="RUNNING",
                        submit_at=starts[s.name] - timedelta(minutes=1),
                        start_at=starts[s.name],
                        nodes=[node],
                        cpus=8,
                        gpus=s.gpus,
                        first_seen_at=starts[s.name],
                        updated_at=starts[s.name],
                    )
                )
                conn.execute(
                    job_gpus.insert(),
                    [{"job_id": ids[s.name], "node": node, "gpu_index": g} for g in range(s.gpus)],
                )
        for i, s in enumerate(scenarios):
            node = f"lat-{i + 1:02d}"
            token = create_token(server.engine, node)
            agent_settings = settings.with_overrides(
                agent={
                    "node": node,
                    "daemon_url": server.url,
                    "token": token,
                    "interval_s": SAMPLE_S,
                    "spool_dir": workdir / node,
                }
            )
            offset = (starts[s.name] - vstart).total_seconds()
            overrides = {
                g: sim.Switch(sim.Steady(sim.TRAINING), sim.Steady(sim.IDLE), at_s=offset + after)
                for g, after in s.idle_after_s.items()
            }
            backend = sim.SimulatedBackend(
                s.gpu, gpus=s.gpus, seed=17 + i, overrides=overrides, interval_s=SAMPLE_S, start=vstart
            )
            profile = Profile(
                s.expected or "healthy", s.name, f"user{i + 1}", s.gpu, gpus=s.gpus, host=Host(**s.host)
            )
            agent = Agent(
                agent_settings,
                [GpuCollector(backend), DemoHostCollector(profile, ids[s.name], seed=i)],
                spool=Spool(agent_settings.agent.spool_dir, agent_settings.agent.spool_max_bytes),
                pusher=Pusher(server.url, node, token, agent_settings.agent.push_timeout_s),
                clock=clock.monotonic,
                sleep=clock.sleep,
                now=clock.now,
            )
            agent.start_sender()
            agents.append(agent)

        jobs = _scheduler_jobs(server)
        fires = _next_fires(jobs, clock.now())
        next_cycle = SAMPLE_S
        end_s = minutes * 60
        restarted = restart_at_min is None
        while True:
            due_job = min(fires.items(), key=lambda kv: kv[1])
            job_t = (due_job[1] - vstart).total_seconds()
            if min(next_cycle, job_t) > end_s:
                break
            if next_cycle <= job_t:  # the agents' sample cycle (samples cover the 10 s before)
                clock.t = next_cycle
                for agent in agents:
                    agent.cycle()
                next_cycle += SAMPLE_S
                continue
            clock.t = job_t
            if not restarted and clock.t >= restart_at_min * 60:
                log(f"restart at virtual minute {clock.t / 60:.1f}")
                server.scheduler = _rebuilt_scheduler(server, settings, clock.now)
                jobs = _scheduler_jobs(server)
                fires = _next_fires(jobs, clock.now())
                restarted = True
                continue
            for agent in agents:  # what the agents sent (push_every) is in before the job looks
                agent.settle(30)
            job_id, at = due_job
            jobs[job_id].func()
            fires[job_id] = jobs[job_id].trigger.get_next_fire_time(at, at + timedelta(microseconds=1))

        t = alert_outbox.c
        with server.engine.connect() as conn:
            rows = conn.execute(
                sa.select(t.job_id, t.cause, t.channel, t.recipient, t.sent_at, t.subject, t.payload)
                .where(t.kind == "job", t.status == "sent")
                .order_by(t.sent_at, t.id)
            ).all()
        sent = [(r.sent_at, r.job_id, r.cause, r.channel, r.recipient, r.subject) for r in rows]
        first_job = ids[scenarios[0].name]
        mail = next((r for r in rows if r.job_id == first_job and r.channel == "email"), None)
        slack = next((r for r in rows if r.job_id == first_job and r.channel == "slack"), None)
        example = (mail.subject, mail.payload, slack.payload) if mail and slack else None
        first_emails = {}
        for s in scenarios:
            found = next((r for r in rows if r.job_id == ids[s.name] and r.channel == "email"), None)
            if found is not None:
                first_emails[s.name] = found.payload["text"]
        outcomes = []
        grace_min = settings.classify.grace_period_s / 60
        for s in scenarios:
            mine = [r for r in sent if r[1] == ids[s.name]]
            first = mine[0] if mine else None
            waste_start = None if s.waste_at_s is None else starts[s.name] + timedelta(seconds=s.waste_at_s)
            latency = None
            if first is not None and waste_start is not None:
                latency = (first[0] - waste_start).total_seconds() / 60
            goal = None
            if s.waste_at_s is not None:
                goal = GOAL_MINUTES + (grace_min if s.waste_at_s < settings.classify.grace_period_s else 0.0)
            outcomes.append(
                Outcome(
                    s.name,
                    s.expected,
                    None if first is None else first[2],
                    latency,
                    goal,
                    [(r[2], r[4]) for r in mine],
                )
            )
        return Run(
            outcomes,
            len(webhook.received),
            len(smtp.received),
            len(rows),
            time.monotonic() - started,
            sent,
            example,
            first_emails,
        )
    finally:
        stop.set()
        for agent in agents:
            agent.close()
        server.__exit__(None, None, None)
        server.engine.dispose()
        webhook.close()
        smtp.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _rebuilt_scheduler(server: Any, settings: Any, clock: Callable[[], datetime]) -> Any:
    """A restarted daemon's scheduler: new jobs, alert service and rollup state, same database."""
    from gpuwatch.daemon.scheduler import build_scheduler

    return build_scheduler(settings, server.app.state.store, clock=clock)


def _table(result: Run) -> Iterator[str]:
    yield f"{'scenario':<32} {'expected':<16} {'first alert':<16} {'minutes':>8} {'goal':>6}  ok"
    for o in result.outcomes:
        minutes = "-" if o.minutes_to_alert is None else f"{o.minutes_to_alert:.1f}"
        goal = "-" if o.goal_minutes is None else f"{o.goal_minutes:.0f}"
        expected, cause, ok = o.expected or "none", o.cause or "none", "yes" if o.ok else "NO"
        yield f"{o.scenario:<32} {expected:<16} {cause:<16} {minutes:>8} {goal:>6}  {ok}"
    yield (
        f"{result.sent_rows} notices sent ({result.webhook_posts} webhook posts, {result.emails} emails) "
        f"in {result.real_seconds:.0f} s real time"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--minutes", type=float, default=85.0, help="virtual minutes to simulate")
    parser.add_argument(
        "--restart-at", type=float, default=None, help="restart the daemon's scheduler at this minute"
    )
    parser.add_argument("--verbose", action="store_true", help="also list every notice sent")
    parser.add_argument("--write-docs", type=Path, default=None, help="rewrite docs/alerts.md's examples")
    parser.add_argument("--db", default=None, help="database URL (default: a temporary SQLite file)")
    args = parser.parse_args(argv)
    random.seed(0)
    result = run(
        minutes=args.minutes,
        restart_at_min=args.restart_at,
        db_url=args.db,
        log=lambda s: print(s, file=sys.stderr),
    )
    if args.write_docs:
        from gpuwatch.alerts import docs

        docs.rewrite(args.write_docs, result.docs_section())
    if args.json:
        print(json.dumps([o.as_dict() for o in result.outcomes], indent=1))
    else:
        print("\n".join(_table(result)))
        if args.verbose:
            for at, job, cause, channel, recipient, subject in result.sent:
                print(f"  {at:%H:%M:%S} job {job} {cause:<16} {channel:<5} {recipient:<22} {subject}")
    return 0 if all(o.ok for o in result.outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
