"""Group commit: request handlers queue validated batches; writer threads store them in groups.

Every ingest request still gets its own answer, and only after the transaction holding
its batch has committed. But with hundreds of agents posting at once, one transaction
(one statement per table) stores many batches, instead of a dozen statements per batch.
A request arriving alone is stored alone, at once: grouping never waits for company.

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
    node_id: int
    batch: Batch
    future: Future = field(default_factory=Future)


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
        item = _Item(node_id, batch)
        self._queue.put(item)
        return item.future

    def _next_group(self) -> list[_Item] | None:
        first = self._queue.get()
        if first is _STOP:
            return None
        group = [first]
        samples = len(first.batch.samples)
        while len(group) < self.max_group_batches and samples < self.max_group_samples:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                self._queue.put(_STOP)  # leave it for this thread's next turn
                break
            group.append(item)
            samples += len(item.batch.samples)
        return group

    def _run(self) -> None:
        while (group := self._next_group()) is not None:
            self._store(group)

    def _store(self, group: list[_Item]) -> None:
        try:
            results: list[IngestResult] = self.store.store_many([(i.node_id, i.batch) for i in group])
        except Exception as exc:
            if len(group) == 1:
                group[0].future.set_exception(exc)
                return
            log.warning(
                "group of %d batches failed (%s); storing them one by one", len(group), type(exc).__name__
            )
            for item in group:
                self._store([item])
            return
        self.groups += 1
        self.batches += len(group)
        for item, result in zip(group, results, strict=True):
            item.future.set_result(result)
