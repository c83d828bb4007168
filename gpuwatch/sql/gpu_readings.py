"""Raw GPU samples, read: :mod:`gpuwatch.sql.readings` for the ``gpu`` kind, under the names
their many readers (the rollup pass, the node list, tests and benchmarks) know.

They are packed (``gpu_sample_packs``, :data:`gpuwatch.sql.schema.GPU_SAMPLE_FIELDS`), scaled
fields as integers; :func:`gpu_samples_between` has a row per (node, GPU, stamp) and a column
per field in its wire unit.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from gpuwatch.sql import readings


def gpu_samples_between(
    conn: sa.Connection,
    start: datetime | None = None,
    end: datetime | None = None,
    *,
    node_id: int | None = None,
) -> sa.Subquery:
    """The GPU samples with ``start <= ts < end`` (either bound left out: unbounded), of one node
    or all, as a subquery: ``node_id``, ``gpu_index``, ``ts`` and a column per field."""
    return readings.samples_between(conn, "gpu", start, end, node_id=node_id)


def read_gpu_samples(
    conn: sa.Connection,
    start: datetime | None = None,
    end: datetime | None = None,
    node_id: int | None = None,
) -> list[sa.Row]:
    """The readings of :func:`gpu_samples_between` as rows, by node, GPU and stamp (tests, tools)."""
    return readings.read_samples(conn, "gpu", start, end, node_id)


def count_gpu_samples(conn: sa.Connection) -> int:
    """How many GPU samples are stored (each reading once)."""
    return readings.count_samples(conn, "gpu")


def stored_reading_keys(
    conn: sa.Connection, node_id: int, first: datetime, last: datetime
) -> set[tuple[int, datetime]]:
    """(GPU index, stamp) of each reading of the node stored with ``first <= ts <= last``."""
    return readings.stored_keys(conn, "gpu", node_id, first, last)


def first_gpu_sample_at(conn: sa.Connection) -> datetime | None:
    """The oldest stored GPU sample's stamp; None when there is none."""
    return readings.first_sample_at(conn, "gpu")


def gpu_samples_per_node(conn: sa.Connection, since: datetime | None) -> dict[int, int]:
    """Node id -> how many GPU samples it has with ``ts >= since`` (all, for None; nodes with
    none left out)."""
    return readings.samples_per_node(conn, "gpu", since)
