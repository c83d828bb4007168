"""Group commit: request handlers queue validated batches; writer threads store them in groups.

Every ingest request still gets its own answer, and only after the transaction holding
its batch has committed. But with hundreds of agents posting at once, one transaction
(one statement per table) stores many batches, instead of a dozen statements per batch.
A request arriving alone is stored alone, at once: grouping never waits for company.
A bundle (several spooled batches of one node in one request) is one queue item, so its
batches share one transaction rather than being split between writer threads.

If a group fails, its batches are retried one by one, so one batch the database refuses
cannot fail the others. A batch that fails on its own with a constraint violation or a
value the database cannot hold (``IntegrityError``, ``DataError``), twice, comes back
``REFUSED`` with the reason (the handler answers that batch 422 and the agent moves it to
``rejected/``): sending it again cannot help, and answering 500 made the agent retry it
forever, in front of its newer batches. The second try, with the partition cache emptied,
is there for the transient ones: a day's partition dropped by retention (or by hand) after
this process cached it fails with "no partition of relation ... found for row", a
constraint violation too. A database outage (:func:`is_outage`, confirmed by the database not
answering a ``SELECT 1``) is not retried batch by batch: every waiting request gets the
exception at once (the handler answers 503, the agents keep their batches). An "outage" error
while the database answers is the batch's own (SQLite's errors and psycopg's client-side ones
have no SQLSTATE; answered 503, such a batch would come back forever, its node's newer batches
queued behind it): it is stored alone, and refused if it fails twice.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

import sqlalchemy as sa

from gpuwatch.daemon.store.batch_store import AnyBatch, BatchStore, IngestResult, IngestStatus, sample_count

log = logging.getLogger(__name__)

# What the database says about a batch itself, not about its own health.
_REFUSALS = (sa.exc.IntegrityError, sa.exc.DataError)
_MAX_DETAIL = 300


def is_outage(exc: BaseException) -> bool:
    """The database, not the batches: no connection, shut down, out of disk or connections.

    A group failing so is answered 503 at once, every batch of it: storing them one by one
    would only try again, batch after batch (each attempt up to the connect timeout), what
    fails the same way. A deadlock or serialization failure (SQLSTATE class 40) is the group's
    own, and the retry one by one is what resolves it.
    """
    if not isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
        return False
    sqlstate = getattr(exc.orig, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith(("08", "53", "57P"))


def database_answers(engine: sa.Engine) -> bool:
    """Whether the database answers a trivial query now (within the engine's connect timeout)."""
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except Exception:
        return False
    return True


def refusal_detail(exc: sa.exc.DBAPIError) -> str:
    """One line for the agent's rejected/ sidecar: the driver's error class and first line."""
    first_line = next(iter(str(exc.orig).strip().splitlines()), "")
    detail = f"the database refused this batch ({type(exc.orig).__name__}): {first_line}"
    return detail[:_MAX_DETAIL]


@dataclass
class _Item:
    """Batches of one node queued together; the future gets their results, in order
    (``single``: the one batch's result itself, as :meth:`IngestWriter.submit` promises)."""

    node_id: int
    batches: list[AnyBatch]
    single: bool = False
    future: Future = field(default_factory=Future)

    def done(self, results: list[IngestResult]) -> None:
        self.future.set_result(results[0] if self.single else results)

    @property
    def samples(self) -> int:
        return sum(map(sample_count, self.batches))


_STOP = object()


class IngestWriter:
    def __init__(
        self,
        store: BatchStore,
        *,
        threads: int = 1,
        max_group_batches: int = 256,
        max_group_samples: int = 50_000,
    ) -> None:
        self.store = store
        self.max_group_batches = max_group_batches
        self.max_group_samples = max_group_samples
        self._queue: queue.Queue = queue.Queue()
        self._threads = [
            threading.Thread(target=self._run, name=f"gpuwatch-ingest-{i}", daemon=True)
            for i in range(threads)
        ]
        self.groups = 0
        self.batches = 0

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Finish what is queued, then stop the threads."""
        for _ in self._threads:
            self._queue.put(_STOP)
        for t in self._threads:
            t.join(timeout=timeout_s)

    def submit(self, node_id: int, batch: AnyBatch) -> Future:
        """Queue one batch; the future's result is its :class:`IngestResult`."""
        item = _Item(node_id, [batch], single=True)
        self._queue.put(item)
        return item.future

    def submit_many(self, node_id: int, batches: list[AnyBatch]) -> Future:
        """Queue a node's batches to be stored in one group; the result is their list of results."""
        item = _Item(node_id, list(batches))
        self._queue.put(item)
        return item.future

    def _next_group(self) -> list[_Item] | None:
        first = self._queue.get()
        if first is _STOP:
            return None
        group = [first]
        batches, samples = len(first.batches), first.samples
        while batches < self.max_group_batches and samples < self.max_group_samples:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                self._queue.put(_STOP)  # leave it for this thread's next turn
                break
            group.append(item)
            batches += len(item.batches)
            samples += item.samples
        return group

    def _run(self) -> None:
        while (group := self._next_group()) is not None:
            self._store(group)

    def _store(self, group: list[_Item]) -> None:
        pairs = [(item.node_id, batch) for item in group for batch in item.batches]
        if len(pairs) == 1:
            try:
                result = self._store_one(*pairs[0])
            except Exception as exc:
                group[0].future.set_exception(exc)
            else:
                group[0].done([result])
            return
        try:
            results: list[IngestResult] = self.store.store_many(pairs)
        except Exception as exc:
            if is_outage(exc) and not database_answers(self.store.engine):
                for item in group:
                    item.future.set_exception(exc)
                return
            log.warning(
                "group of %d batches failed (%s); storing them one by one", len(pairs), type(exc).__name__
            )
            for item in group:
                self._store_alone(item)
            return
        self._count(len(pairs))
        start = 0
        for item in group:
            item.done(results[start : start + len(item.batches)])
            start += len(item.batches)

    def _count(self, batches: int) -> None:
        self.groups += 1
        self.batches += batches

    def _store_one(self, node_id: int, batch: AnyBatch) -> IngestResult:
        """One batch in its own transaction; ``REFUSED`` if the database refuses it twice.

        An error that looks like an outage (:func:`is_outage`) while the database answers is
        this batch's own too: errors without SQLSTATE include the driver's and SQLite's, a
        query the client could not send (psycopg's parameter limit) or SQLite could not parse.
        Answered 503, the agent would send the batch again forever, every batch of its node
        waiting behind it; refused, it waits in the agent's ``rejected/`` (``gpuwatch spool
        requeue`` once the cause is fixed) and the rest flows.
        """
        store = self.store.store_many
        try:
            result = store([(node_id, batch)])[0]
        except Exception as first:
            if not self._is_batch_error(first):
                raise
            # once more, partitions checked afresh: the first failure may have been a race, not
            # the batch (retention dropped the day's partition after this process cached it)
            self.store.partitions.forget()
            try:
                result = store([(node_id, batch)])[0]
            except Exception as exc:
                if not self._is_batch_error(exc):
                    raise
                detail = refusal_detail(exc)
                log.warning(
                    "batch refused by the database", extra={"batch_id": str(batch.batch_id), "why": detail}
                )
                return IngestResult(IngestStatus.REFUSED, 0, detail)
        self._count(1)
        return result

    def _is_batch_error(self, exc: Exception) -> bool:
        """The database refused the batch (constraint, value), or an error without SQLSTATE
        (the client's, or SQLite's) came while the database answers. Errors the server gave a
        SQLSTATE keep their meaning: a deadlock or a statement timeout is retried (503)."""
        if isinstance(exc, _REFUSALS):
            return True
        if isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
            return getattr(exc.orig, "sqlstate", None) is None and database_answers(self.store.engine)
        return False

    def _store_alone(self, item: _Item) -> None:
        """Each batch of a failed group in its own transaction; a bundle's batches too.

        Refused batches get their ``REFUSED`` result like any other. A bundle's future fails
        only on an error that is not the batch's fault (an outage): the handler answers the
        whole request 503, and the agent sends the bundle again; the batches stored
        meanwhile come back as duplicates.
        """
        results: list[IngestResult] = []
        for batch in item.batches:
            try:
                results.append(self._store_one(item.node_id, batch))
            except Exception as exc:
                item.future.set_exception(exc)
                return
        item.done(results)
