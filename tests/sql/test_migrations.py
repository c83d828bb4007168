"""Migrations go up, down and up again, and leave exactly the schema the code declares."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from gpuwatch import wire
from gpuwatch.daemon.store.columns import PROCESS_FIELDS
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.process_packs import ELEMENT_FIELDS
from gpuwatch.sql.schema import (
    GPU_IDENTITY_FIELDS,
    GPU_SAMPLE_FIELDS,
    SAMPLE_KINDS,
    gpu_process_packs,
    gpu_sample_packs,
    metadata,
)


def _diff(engine: sa.Engine) -> list:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_name": migrate.include_name}
        )
        return compare_metadata(ctx, metadata)


def test_upgrade_downgrade_upgrade(db_url):
    engine = create_engine(db_url)
    migrate.upgrade(engine)
    assert migrate.is_up_to_date(engine)
    assert _diff(engine) == []
    migrate.downgrade(engine, "base")
    assert migrate.current_revision(engine) is None
    assert set(sa.inspect(engine).get_table_names()) <= {"alembic_version"}
    migrate.upgrade(engine)
    assert migrate.is_up_to_date(engine)
    assert _diff(engine) == []
    engine.dispose()


def test_every_wire_field_has_a_column():
    """Sample packs mirror the wire models, so nothing an agent sends is silently dropped."""
    assert set(SAMPLE_KINDS) == set(wire.SAMPLE_KINDS)
    for kind, spec in SAMPLE_KINDS.items():
        if kind == "gpu":  # below: identity fields live in ``gpus``
            continue
        fields = set(wire.SAMPLE_KINDS[kind].model_fields) - {"kind", "ts"}
        assert fields == {f.name for f in (*spec.keys, *spec.fields)}, kind
        assert spec.columns == [
            f"{spec.prefix}sample_ts",
            *(spec.column(f) for f in (*spec.keys, *spec.fields)),
        ]
    # the host kinds share one table: every column is one kind's, named by its prefix
    host = {spec.table for kind, spec in SAMPLE_KINDS.items() if kind != "gpu"}
    assert len(host) == 1
    columns = {
        "node_id",
        "ts",
        "ts_last",
        *(c for k, s in SAMPLE_KINDS.items() if k != "gpu" for c in s.columns),
    }
    assert columns == set(host.pop().c.keys())
    gpu_fields = set(wire.GpuSample.model_fields) - {
        "kind",
        "processes",
        "ts",
        "gpu_index",
        *GPU_IDENTITY_FIELDS,
    }
    assert gpu_fields == {f.name for f in GPU_SAMPLE_FIELDS}
    columns = {"node_id", "ts", "ts_last", "sample_ts", "gpu_index", *(f.column for f in GPU_SAMPLE_FIELDS)}
    assert columns == set(gpu_sample_packs.c.keys())
    assert set(PROCESS_FIELDS) == set(wire.GpuProcess.model_fields)
    assert set(ELEMENT_FIELDS) | {"node_id", "ts", "ts_last"} == set(gpu_process_packs.c.keys())


def test_the_head_read_from_the_files_is_alembics(db_url):
    """Commands check the schema without importing Alembic: the head read from the migration
    files and the revision read from alembic_version are what Alembic itself says."""
    from alembic.script import ScriptDirectory

    engine = create_engine(db_url)
    try:
        head = ScriptDirectory.from_config(migrate.alembic_config(engine)).get_current_head()
        assert migrate.head_revision() == head
        assert migrate.current_revision(engine) is None and not migrate.is_up_to_date(engine)
        migrate.upgrade(engine, "0015")
        assert migrate.current_revision(engine) == "0015" and not migrate.is_up_to_date(engine)
        migrate.upgrade(engine)
        assert migrate.current_revision(engine) == head and migrate.is_up_to_date(engine)
    finally:
        engine.dispose()
