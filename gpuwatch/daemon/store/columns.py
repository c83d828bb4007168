"""A batch as the store needs it: per sample kind, one list per field; either wire format.

The store (``daemon/store/batch_store.py``) sends PostgreSQL one array per column, and builds dict rows
from columns for SQLite. A v2 batch (``wire/v2.py``) arrives in columns: its lists are used
as they are. A v1 batch's models are transposed once here (in C: ``itemgetter`` over each
model's ``__dict__`` and ``zip``). Everything after this point does not know which format a
batch came in, so the two cannot store different rows (``tests/daemon/store/test_columns.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from operator import itemgetter
from typing import Any

from gpuwatch import wire
from gpuwatch.sql.schema import GPU_IDENTITY_FIELDS
from gpuwatch.wire import v2 as wire_v2

#: fields of a ``wire.GpuProcess``, in order; ``sample`` (the GPU row) comes first in columns
PROCESS_FIELDS = ("pid", "used_memory_bytes", "sm_util_ratio", "memory_util_ratio", "job_id")

#: kind -> its sample fields other than ``kind`` and ``processes`` (``ts`` first), v1's order
FIELDS: dict[str, tuple[str, ...]] = {
    kind: tuple(name for name in model.model_fields if name not in ("kind", "processes"))
    for kind, model in wire.SAMPLE_KINDS.items()
}
for _kind, _names in FIELDS.items():  # the v2 columns must be v1's fields, ts first
    assert tuple(n for n in wire_v2.COLUMNS[_kind].model_fields if n != "processes") == _names, _kind
    assert len(_names) > 1, _kind  # itemgetter of one name returns the value, not a tuple


#: kind -> field -> v1's default: what a column a v2 batch left out holds for every sample
DEFAULTS: dict[str, dict[str, Any]] = {kind: model.defaults for kind, model in wire_v2.COLUMNS.items()}


@dataclass(frozen=True)
class BatchColumns:
    """One batch's samples as columns. ``tables[kind][field]`` is a sequence with one value
    per sample of that kind, or None for a column a v2 batch left out (every sample has the
    field's default: :meth:`column` fills it in; the store sends such a column of a whole
    group at once). ``processes[field]`` has one value per GPU process,
    ``processes["sample"]`` the row of ``tables["gpu"]`` it belongs to."""

    batch_id: str
    seq: int
    agent_version: str
    tables: dict[str, dict[str, Any]]
    processes: dict[str, Any] | None
    samples: int
    #: the distinct ``ts`` of all samples (a batch has one per cycle)
    stamps: frozenset[datetime]

    def column(self, kind: str, name: str) -> Sequence[Any]:
        values = self.tables[kind][name]
        if values is None:
            return [DEFAULTS[kind][name]] * len(self.tables[kind]["ts"])
        return values

    def gpu_identities(self) -> dict[int, tuple]:
        """GPU index -> its identity (:data:`GPU_IDENTITY_FIELDS`) as last seen in the batch."""
        if "gpu" not in self.tables:
            return {}
        identities = zip(*(self.column("gpu", field) for field in GPU_IDENTITY_FIELDS), strict=True)
        return dict(zip(self.tables["gpu"]["gpu_index"], identities, strict=True))


def columns_of(batch: wire.Batch | Any) -> BatchColumns:
    """The batch's columns, from a v1 ``wire.Batch`` or a v2 ``wire_v2.ColumnarBatch``."""
    if isinstance(batch, wire.Batch):
        return _of_v1(batch)
    tables: dict[str, dict[str, Any]] = {}
    processes = None
    for kind, cols in wire_v2.kinds(batch):
        tables[kind] = cols.__dict__  # field -> list, or None (left out); read, never changed
        if kind == "gpu" and cols.processes is not None:
            procs = cols.processes
            processes = {"sample": procs.sample, **{name: procs.column(name) for name in PROCESS_FIELDS}}
    return _made(batch, tables, processes, wire_v2.sample_count(batch))


def _made(batch: Any, tables: dict[str, dict[str, Any]], processes: Any, samples: int) -> BatchColumns:
    stamps = frozenset(chain.from_iterable(columns["ts"] for columns in tables.values()))
    return BatchColumns(
        str(batch.batch_id), batch.seq, batch.agent_version, tables, processes, samples, stamps
    )


_read_process = itemgetter(*PROCESS_FIELDS)


def _of_v1(batch: wire.Batch) -> BatchColumns:
    by_kind: dict[str, list[Any]] = {}
    for sample in batch.samples:
        found = by_kind.get(sample.kind)
        if found is None:
            found = by_kind[sample.kind] = []
        found.append(sample)
    tables = {kind: _transposed(kind, samples) for kind, samples in by_kind.items()}
    processes = None
    gpus = by_kind.get("gpu", ())
    owners = [row for row, sample in enumerate(gpus) for _ in sample.processes or ()]
    if owners:
        rows = map(_read_process, map(vars, [p for s in gpus for p in s.processes or ()]))
        processes = {"sample": owners, **dict(zip(PROCESS_FIELDS, zip(*rows, strict=True), strict=True))}
    return _made(batch, tables, processes, len(batch.samples))


#: kind -> the getter of its fields from a model's ``__dict__``, made once (not per batch)
_READ_FIELDS = {kind: itemgetter(*names) for kind, names in FIELDS.items()}


def _transposed(kind: str, samples: list[Any]) -> dict[str, Any]:
    """Field name -> tuple of values, read off the models' ``__dict__`` (2.6x faster than
    attribute access on pydantic models) and transposed by ``zip``, both in C."""
    if len(samples) == 1:  # a one-cycle batch's host kinds: zip(values) makes the 1-tuples
        return dict(zip(FIELDS[kind], zip(_READ_FIELDS[kind](vars(samples[0]))), strict=True))
    rows = list(map(_READ_FIELDS[kind], map(vars, samples)))
    return dict(zip(FIELDS[kind], zip(*rows, strict=True), strict=True))
