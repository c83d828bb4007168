"""Scheduled work inside the daemon (APScheduler), one place that lists every job.

Jobs now: create partitions ahead (hourly, and once at start); roll raw samples up per
minute (at :05 of every minute, :data:`ROLLUP_LAG` behind); classify running jobs (every
``classify.evaluate_interval_s`` on the clock, just after a rollup, and within a minute of
start) and store their verdicts; store ended jobs' report totals (every
:data:`TOTALS_EVERY_S`); with ``slurm.enabled`` the Slurm sync (squeue every
``sync_interval_s``, sacct every ``sacct_interval_s``); retention (``[retention]``); alerts
(``daemon/alert_jobs.py``: rules, outbox worker, digests, enforcement, leader-only).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from gpuwatch.clock import utcnow
from gpuwatch.config import Settings
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql.rollups import Rollup

log = logging.getLogger(__name__)

#: a minute is rolled up once this long after it ended (batches in flight; a later batch
#: re-rolls it), by the rollup job at :ROLLUP_AT_S of every minute
ROLLUP_LAG = timedelta(minutes=1)
ROLLUP_AT_S = 5
#: classification runs on a grid of ``evaluate_interval_s`` from the epoch, offset to just
#: after the rollup: a verdict sees the newest minute, and a restart does not shift the grid
CLASSIFY_AT_S = 10
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: ended jobs' report totals (views/job_totals.py) are stored this often, at most this many
#: batches a run
TOTALS_EVERY_S = 300
TOTALS_BATCHES = 20


def first_classification(now: datetime) -> datetime:
    """The first classification after a start: the next :CLASSIFY_AT_S past a minute boundary
    (within a minute), not a whole interval later."""
    at = now.replace(second=CLASSIFY_AT_S, microsecond=0)
    return at if at > now else at + timedelta(minutes=1)


def build_scheduler(
    settings: Settings, store: BatchStore, clock: Callable[[], datetime] = utcnow
) -> BackgroundScheduler:
    """Every scheduled job; those that must run once per cluster run only on the leader
    (several daemon replicas may share one PostgreSQL database, see daemon/leader.py).

    ``clock`` is what the jobs take as now (the rollup edge, the evaluation time, the alerts'
    now): a virtual clock drives the same jobs through simulated hours (``bench/alert_latency.py``)."""
    from apscheduler.events import EVENT_SCHEDULER_SHUTDOWN

    from gpuwatch.daemon.leader import LeaderLock

    scheduler = BackgroundScheduler(timezone="UTC", job_defaults={"coalesce": True, "max_instances": 1})
    leader = LeaderLock(store.engine, settings.daemon.leader_lock_key)
    scheduler.add_listener(lambda _event: leader.release(), EVENT_SCHEDULER_SHUTDOWN)

    def leader_only(fn: Callable[[], object]) -> Callable[[], None]:
        @functools.wraps(fn)  # keeps __wrapped__: the job still shows what it runs
        def run() -> None:
            if leader.is_leader():
                fn()

        return run

    def partitions_ahead() -> None:
        store.partitions.forget()
        store.partitions.ensure_ahead(settings.daemon.partition_days_ahead)

    scheduler.add_job(partitions_ahead, "interval", hours=1, id="partitions", name="create partitions ahead")
    partitions_ahead()

    rollup = Rollup(store.engine, lag=ROLLUP_LAG, raw_days=settings.retention.raw_days)

    def rollup_pass() -> None:
        rollup.run_once(now=clock())

    scheduler.add_job(
        leader_only(rollup_pass),
        "cron",
        second=ROLLUP_AT_S,
        id="rollup",
        name="per-minute rollups",
    )

    def job_totals() -> None:
        from gpuwatch.views.job_totals import BATCH, store_job_totals

        stored = 0
        for _ in range(TOTALS_BATCHES):  # a backlog (an upgrade, an outage) over several runs
            n = store_job_totals(store.engine, thresholds=settings.classify, now=clock())
            stored += n
            if n < BATCH:
                break
        if stored:
            log.info("stored the totals of %d ended job(s)", stored)

    scheduler.add_job(
        leader_only(job_totals),
        "interval",
        seconds=TOTALS_EVERY_S,
        id="job-totals",
        name="ended jobs' report totals",
    )

    # jobs that ended are classified once at their end, when their last minutes are rolled up
    ended_until = [clock() - timedelta(hours=1)]  # at start: catch up an hour

    def classify_running() -> None:
        from gpuwatch.classify.runner import evaluate_ended, evaluate_running

        now = clock()
        found = evaluate_running(store.engine, now, settings.classify)
        ready = now - rollup.lag - timedelta(minutes=1)
        ended = evaluate_ended(store.engine, ended_until[0], ready, settings.classify)
        ended_until[0] = max(ended_until[0], ready)
        log.info("classified %d running job(s) and %d that ended", len(found), len(ended))

    every = settings.classify.evaluate_interval_s
    scheduler.add_job(
        leader_only(classify_running),
        IntervalTrigger(seconds=every, start_date=_EPOCH + timedelta(seconds=CLASSIFY_AT_S), timezone="UTC"),
        id="classify",
        name="classify running jobs",
        next_run_time=first_classification(clock()),
    )

    def retention() -> None:
        from gpuwatch.sql.retention import apply_retention

        r = settings.retention
        apply_retention(
            store.engine,
            raw_days=r.raw_days,
            rollup_days=r.rollup_days,
            minute_days=r.minute_days,
            batch_record_days=r.batch_record_days,
            process_days=r.process_days,
        )
        store.partitions.forget()  # dropped partitions must be re-made if an old batch arrives

    scheduler.add_job(
        retention, "interval", seconds=settings.retention.run_every_s, id="retention", name="retention"
    )

    if settings.slurm.enabled:  # first passes at once, then every interval (slurm_sync.py)
        from gpuwatch.daemon.slurm_sync import SlurmSync

        sync, start = SlurmSync.from_config(store.engine, settings.slurm), datetime.now(timezone.utc)
        for fn, every, job_id in (
            (sync.sync_running, settings.slurm.sync_interval_s, "slurm-running"),
            (sync.sync_finished, settings.slurm.sacct_interval_s, "slurm-finished"),
        ):
            scheduler.add_job(
                leader_only(fn), "interval", seconds=every, id=job_id, name=job_id, next_run_time=start
            )
    from gpuwatch.daemon.alert_jobs import register_alert_jobs

    register_alert_jobs(scheduler, settings, store.engine, clock)
    return scheduler
