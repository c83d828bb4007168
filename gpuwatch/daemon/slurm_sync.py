"""The daemon's Slurm sync: which jobs run, on which GPUs, and how they ended.

Two scheduled passes (``gpuwatch/daemon/scheduler.py``, when ``slurm.enabled``):

- :meth:`SlurmSync.sync_running`, every ``slurm.sync_interval_s`` (30 s): one ``squeue
  --json --all`` for the whole cluster (``scontrol show job -d -o`` where the JSON plugin is
  missing) -> every job upserted into ``slurm_jobs`` and each job's GPUs (node, GRES index)
  into ``job_gpus``. A job that left ``squeue`` keeps its row as it was until ``sacct``
  says how it ended.
- :meth:`SlurmSync.sync_finished`, every ``slurm.sacct_interval_s`` (300 s): ``sacct`` over
  the last ``slurm.sacct_lookback_s`` -> final state, end, exit code, elapsed of the jobs
  that ended (running ones are ``squeue``'s to report). The window reaches further back,
  up to :data:`MAX_LOOKBACK`, when rows are still unfinished in the store but no longer in
  ``squeue`` (the daemon was down while they ended), so they do not stay RUNNING forever.

That is 2.2 calls a minute to ``slurmctld``/``slurmdbd`` at the defaults, whatever the
cluster's size (``bench/slurm_sync.py`` measures the cycle).

Failures (a command that fails or times out, output that does not parse, the database
away) are logged once per distinct message, and again when the pass recovers; the next
pass simply tries again, so the daemon never dies of Slurm.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from gpuwatch.clock import utcnow
from gpuwatch.config import SlurmConfig
from gpuwatch.slurm.commands import SlurmClient
from gpuwatch.slurm.errors import SlurmError
from gpuwatch.slurm.model import SlurmJob
from gpuwatch.sql import jobs as store

log = logging.getLogger(__name__)

#: furthest back a widened ``sacct`` window goes for stale unfinished rows
MAX_LOOKBACK = timedelta(days=7)


@dataclass(frozen=True)
class SyncResult:
    """What one pass did; ``fetch_s`` is the Slurm call plus parsing, ``store_s`` the database."""

    jobs: int
    gpu_jobs_changed: int
    fetch_s: float
    store_s: float


class SlurmSync:
    """The two sync passes over one cluster; safe to call from the scheduler's threads.

    ``engine`` is the daemon's store, ``client`` runs the commands (its ``prefix`` and
    ``timeout_s`` come from ``slurm.command_prefix`` and ``slurm.command_timeout_s``).
    """

    def __init__(
        self,
        engine: sa.Engine,
        client: SlurmClient,
        config: SlurmConfig,
        *,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.engine = engine
        self.client = client
        self.config = config
        self._now = now
        #: job ids of the latest successful squeue pass; None before the first
        self.running_ids: frozenset[str] | None = None
        #: pass name -> message of its current failure (logged once until it changes or clears)
        self.failures: dict[str, str] = {}
        # the two passes may overlap (scheduler threads): one writer at a time, so two
        # upserts of the same rows never wait on each other's row locks
        self._write_lock = threading.Lock()

    @classmethod
    def from_config(cls, engine: sa.Engine, config: SlurmConfig) -> SlurmSync:
        if config.rest_url:
            from gpuwatch.slurm.rest import SlurmRestClient

            token = config.rest_token_file.read_text().strip() if config.rest_token_file else None
            client: Any = SlurmRestClient(
                config.rest_url,
                api_version=config.rest_api_version,
                user=config.rest_user,
                token=token,
                timeout_s=config.command_timeout_s,
            )
        else:
            client = SlurmClient(
                config.command_prefix, timeout_s=config.command_timeout_s, cluster=config.cluster
            )
        return cls(engine, client, config)

    # ------------------------------------------------------------------ passes

    def sync_running(self) -> SyncResult | None:
        """One ``squeue`` pass; None (logged) if Slurm or the database failed."""
        return self._guarded("sync_running", self._sync_running)

    def sync_finished(self) -> SyncResult | None:
        """One ``sacct`` pass; None (logged) if Slurm or the database failed."""
        return self._guarded("sync_finished", self._sync_finished)

    def _sync_running(self) -> SyncResult:
        t0 = time.perf_counter()
        found = self.client.jobs()
        t1 = time.perf_counter()
        result = self.store_running(found)
        return SyncResult(result.jobs, result.gpu_jobs_changed, t1 - t0, time.perf_counter() - t1)

    def store_running(self, found: list[SlurmJob]) -> SyncResult:
        """Write one ``squeue`` answer (separate from the call, for tests and the bench)."""
        t0 = time.perf_counter()
        now = self._now()
        with self._write_lock, self.engine.begin() as conn:
            n = store.upsert_jobs(conn, found, now)
            changed = store.replace_job_gpus(conn, {j.job_id: j.gpu_indices for j in found})
        self.running_ids = frozenset(j.job_id for j in found)
        return SyncResult(n, changed, 0.0, time.perf_counter() - t0)

    def _sync_finished(self) -> SyncResult:
        now = self._now()
        since = now - timedelta(seconds=self.config.sacct_lookback_s)
        since = min(since, self._stale_since(now))
        t0 = time.perf_counter()
        ended = [j for j in self.client.finished_jobs(since) if j.finished]
        t1 = time.perf_counter()
        with self._write_lock, self.engine.begin() as conn:
            n = store.upsert_jobs(conn, ended, now)
        return SyncResult(n, 0, t1 - t0, time.perf_counter() - t1)

    def _stale_since(self, now: datetime) -> datetime:
        """The earliest start of rows unfinished in the store but gone from the last squeue."""
        if self.running_ids is None:  # no squeue answer yet: nothing is known to be gone
            return now
        with self.engine.connect() as conn:
            unfinished = store.unfinished_jobs(conn)
        times = [ts for job_id, ts in unfinished.items() if job_id not in self.running_ids and ts]
        if not times:
            return now
        return max(now - MAX_LOOKBACK, min(times) - timedelta(minutes=1))

    # ------------------------------------------------------------------ errors

    def _guarded(self, name: str, fn: Callable[[], SyncResult]) -> SyncResult | None:
        try:
            result = fn()
        except Exception as exc:  # the daemon must outlive any Slurm or database trouble
            expected = isinstance(exc, (SlurmError, sa.exc.SQLAlchemyError, OSError))
            message = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            if self.failures.get(name) != message:
                self.failures[name] = message
                log.warning(
                    "slurm %s failed (retried every cycle, logged once): %s",
                    name,
                    message,
                    exc_info=not expected,  # a traceback only for what looks like a bug
                )
            return None
        if self.failures.pop(name, None) is not None:
            log.info("slurm %s works again", name)
        log.debug("slurm %s: %s", name, result)
        return result
