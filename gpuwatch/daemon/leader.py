"""One leader among several daemons for scheduled work.

The daemon's scheduler (``daemon/scheduler.py``) runs rollups, classification, retention and
the Slurm sync only on the leader (one squeue per cycle for the cluster, not one per replica);
the alert jobs take their own lock (``alerts.leader_lock_key``). Ingest is stateless and runs
on every replica.

PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) held on a dedicated
connection, outside the pool, for as long as this daemon leads. If that connection dies
(network, server restart, daemon crash) the server releases the lock and another daemon takes
it on its next try; this one notices on its own next check and tries to take it again.
SQLite: one database file means one daemon, so it always leads.

Leadership only decides who *evaluates rules and queues* notices; the worker's leases are what
make sending safe even if two daemons briefly both believe they lead.
"""

from __future__ import annotations

import contextlib
import logging
import threading

import sqlalchemy as sa

from gpuwatch.sql.engine import is_postgres

log = logging.getLogger(__name__)


class LeaderLock:
    def __init__(self, engine: sa.Engine, key: int) -> None:
        self.engine = engine
        self.key = key
        self._conn: sa.Connection | None = None
        self._lock = threading.Lock()

    @property
    def always(self) -> bool:
        return not is_postgres(self.engine)

    def is_leader(self) -> bool:
        """True if this process holds (or has just taken) the lock."""
        if self.always:
            return True
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.execute(sa.text("SELECT 1"))
                    self._conn.commit()
                    return True
                except sa.exc.DBAPIError:
                    log.warning("leader: lock connection lost; trying to lead again")
                    self._drop()
            return self._try()

    def _try(self) -> bool:
        try:
            conn = self.engine.connect()
        except sa.exc.DBAPIError as exc:
            log.warning("leader: cannot connect: %s", exc)
            return False
        try:
            got = bool(conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": self.key}).scalar())
            conn.commit()  # session lock survives the commit; no idle-in-transaction
        except sa.exc.DBAPIError as exc:
            log.warning("leader: lock query failed: %s", exc)
            conn.close()
            return False
        if not got:
            conn.close()
            return False
        # keep this connection out of the pool for good: the lock lives and dies with it
        conn.detach()
        self._conn = conn
        log.info("leader: this daemon now runs the leader-only scheduled jobs (advisory lock %d)", self.key)
        return True

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sa.exc.DBAPIError):
                self._conn.close()
            self._conn = None

    def release(self) -> None:
        if self.always:
            return
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
                    self._conn.commit()
                except sa.exc.DBAPIError:
                    pass
                self._drop()
