"""Group commit: request handlers queue validated batches; writer threads store them in groups.

Every ingest request still gets its own answer, and only after the transaction holding
its batch has committed. But with hundreds of agents posting at once, one transaction
(one statement per table) stores many batches, instead of a dozen statements per batch.
A request arriving alone is stored alone, at once: grouping never waits for company.
A bundle (several spooled batches of one node in one request) is one queue item, so its
batches share one transaction rather than being split between writer threads.

If a group fails, its batches are retried one by one, so one batch the database refuses
cannot fail the others; database outages reach every waiting request as the exception
(the handler answers 503, the agents keep their batches).
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

from gpuwatch.sql.ingest import BatchStore, IngestResult
from gpuwatch.wire import Batch

log = logging.getLogger(__name__)


@dataclass
class _Item:
    """Batches of one node queued together; the future gets their results, in order
    (``single``: the one batch's result itself, as :meth:`IngestWriter.submit` promises)."""

    node_id: int
    batches: list[Batch]
    single: bool = False
    future: Future = field(default_factory=Future)

    def done(self, results: list[IngestResult]) -> None:
        self.future.set_result(results[0] if self.single else results)

    @property
    def samples(self) -> int:
        return sum(len(batch.samples) for batch in self.batches)


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

    def submit(self, node_id: int, batch: Batch) -> Future:
        """Queue one batch; the future's result is its :class:`IngestResult`."""
        item = _Item(node_id, [batch], single=True)
        self._queue.put(item)
        return item.future

    def submit_many(self, node_id: int, batches: list[Batch]) -> Future:
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
        try:
            results: list[IngestResult] = self.store.store_many(pairs)
        except Exception as exc:
            if len(pairs) == 1:
                group[0].future.set_exception(exc)
                return
            log.warning(
                "group of %d batches failed (%s); storing them one by one", len(pairs), type(exc).__name__
            )
            for item in group:
                self._store_alone(item)
            return
        self.groups += 1
        self.batches += len(pairs)
        start = 0
        for item in group:
            item.done(results[start : start + len(item.batches)])
            start += len(item.batches)

    def _store_alone(self, item: _Item) -> None:
        """Each batch of a failed group in its own transaction; a bundle's batches too.

        A bundle's future then fails with the first batch's error, if any batch failed: the
        handler answers the whole request as it would a single failed batch (503 for an
        outage), and the agent sends the bundle again; the batches stored meanwhile come back
        as duplicates.
        """
        results: list[IngestResult] = []
        error: BaseException | None = None
        for batch in item.batches:
            alone = _Item(item.node_id, [batch], single=True)
            self._store([alone])
            try:
                results.append(alone.future.result())
            except Exception as exc:
                error = error or exc
        if error is not None:
            item.future.set_exception(error)
        else:
            item.done(results)
