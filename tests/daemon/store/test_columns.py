"""Both wire formats become the same columns, so the store cannot tell them apart."""

from __future__ import annotations

from datetime import timedelta

from gpuwatch.daemon.store.batch_store import days_of, gpu_identities, sample_count, sample_rows
from gpuwatch.daemon.store.columns import FIELDS, columns_of
from gpuwatch.daemon.store.packing import pack_rows
from gpuwatch.wire import v2 as wire_v2
from tests import factories
from tests.test_wire_v2 import _mixed_batch


def _as_lists(columns) -> tuple[dict, dict | None]:
    tables = {
        kind: {name: list(columns.column(kind, name)) for name in FIELDS[kind]} for kind in columns.tables
    }
    processes = None if columns.processes is None else {k: list(v) for k, v in columns.processes.items()}
    return tables, processes


def test_v1_and_v2_give_the_same_columns():
    batch = _mixed_batch()
    v2 = wire_v2.ColumnarBatch.model_validate_json(wire_v2.encode(batch, 2))
    one, two = columns_of(batch), columns_of(v2)
    assert _as_lists(one) == _as_lists(two)
    assert (
        (one.batch_id, one.seq, one.samples)
        == (two.batch_id, two.seq, two.samples)
        == (
            str(batch.batch_id),
            batch.seq,
            len(batch.samples),
        )
    )
    assert sample_count(batch) == sample_count(v2) == sample_count(one) == len(batch.samples)
    next_day = factories.T0.date() + timedelta(days=1)
    assert days_of(batch) == days_of(v2) == {factories.T0.date(), next_day}
    assert gpu_identities(batch) == gpu_identities(v2)
    assert gpu_identities(batch)[7][2] == "00000000:1F:00.0"  # (uuid, name, pci_bus_id)


def test_rows_and_packs_are_the_same_from_either_format():
    batch = factories.batch(cycles=2, gpus=2)  # crosses midnight: two packs
    v2 = wire_v2.ColumnarBatch.model_validate_json(wire_v2.encode(batch, 2))
    assert sample_rows(7, batch) == sample_rows(7, v2)
    packs = pack_rows(7, columns_of(v2))
    assert packs == pack_rows(7, columns_of(batch))
    processes, gpu = packs["gpu_process_packs"], packs["gpu_sample_packs"]
    assert [p["ts"].date() for p in processes] == sorted(days_of(batch))
    assert [p["pid"] for p in processes] == [[4242, 4243], [4242, 4243]]
    # GPU samples are cut by UTC hour: midnight cuts them too
    assert [(p["ts"].date(), p["gpu_index"]) for p in gpu] == [
        (day, [0, 1]) for day in sorted(days_of(batch))
    ]
    assert all(row["node_id"] == 7 for rows in sample_rows(7, v2).values() for row in rows)


def test_a_column_left_out_is_stored_as_its_default():
    batch = factories.batch(cycles=1, gpus=2)
    rows = sample_rows(1, wire_v2.ColumnarBatch.model_validate_json(wire_v2.encode(batch, 2)))
    (pack,) = rows["gpu_sample_packs"]
    assert pack["state"] == ["ok", "ok"]
    assert pack["sm_occupancy_ppm"] == [None, None]
