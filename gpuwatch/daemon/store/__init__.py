"""The daemon's write path: a batch (either wire format) into the storage core's tables.

``batch_store.py`` stores a group of batches in one transaction (:class:`BatchStore`);
``columns.py`` turns either wire format into one list per field, ``pg_arrays.py`` and
``pg_copy.py`` hand those lists to PostgreSQL in binary, ``packing.py`` packs the samples of
every kind and the GPU processes. The tables themselves are :mod:`gpuwatch.sql`'s.
"""

from gpuwatch.daemon.store.batch_store import (
    AnyBatch,
    BatchStore,
    IngestResult,
    IngestStatus,
    count_rows,
)

__all__ = ["AnyBatch", "BatchStore", "IngestResult", "IngestStatus", "count_rows"]
