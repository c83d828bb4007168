"""Merging a spool backlog's v2 batches into one multi-cycle batch before it is sent.

Why: the daemon's cost is mostly per batch, not per sample. Parsing, the ingest log's claim
row, the writer's bookkeeping and the store's per-batch work cost ~0.6 ms of daemon CPU for a
one-cycle batch of 8 GPUs, sent alone or in a bundle; the same cycles as one 30-cycle batch
cost ~0.2 ms each (``bench/ingest.py --per-batch 30``, docs/scaling.md). A backlog (after a
daemon outage, or held back by ``agent.push_every``) is therefore sent as ONE batch holding
the samples of several spooled batches, each kind's columns concatenated in spool order.

The merged batch's ``batch_id`` is a UUIDv5 of its constituents' ids, so re-sending the same
backlog after a lost answer is a duplicate the daemon recognises. If the agent crashes and
regroups the backlog differently, the new batch has another id; its samples are still stored
once (the sample tables' primary keys, ``daemon/store/batch_store.py``). A merged batch the daemon refuses
(422, 413) is sent again as a bundle of its constituents, so each is settled by its own answer
and only a bad one lands in ``rejected/``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from gpuwatch import wire
from gpuwatch.wire import v2 as wire_v2

#: namespace of merged batch ids: uuid5(MERGE_NAMESPACE, the constituents' ids joined by ",")
MERGE_NAMESPACE = uuid.UUID("5d0c1a53-3f0e-4b7c-9a55-6f1b2e8c0d47")


def merged_id(batch_ids: Sequence[str]) -> uuid.UUID:
    """The id of the batch merged from ``batch_ids`` (in order): the same backlog, the same id."""
    return uuid.uuid5(MERGE_NAMESPACE, ",".join(batch_ids))


def parse(bodies: Sequence[bytes]) -> list[Any]:
    """The v2 batches of ``bodies``; ValueError if one is not a valid v2 batch."""
    return [wire_v2.ColumnarBatch.model_validate_json(body) for body in bodies]


def mergeable_prefix(batches: Sequence[Any]) -> int:
    """How many of the leading ``batches`` may be one batch: same node and agent version
    (an upgrade mid-backlog splits it, so the daemon records each version), and no more than
    ``wire.MAX_SAMPLES_PER_BATCH`` samples together."""
    if not batches:
        return 0
    first, total = batches[0], 0
    for count, batch in enumerate(batches):
        total += wire_v2.sample_count(batch)
        if batch.node != first.node or batch.agent_version != first.agent_version:
            return count
        if total > wire.MAX_SAMPLES_PER_BATCH:
            return max(count, 1)
    return len(batches)


def merge(batches: Sequence[Any]) -> Any:
    """One v2 batch with every sample of ``batches`` (v2 batches of one node), in order.

    Envelope: the id from :func:`merged_id`, the last batch's ``seq`` and ``created_at`` (the
    daemon's record of the node's progress). A column every constituent left out stays left
    out; one some left out gets their samples' defaults. The result is validated like any
    batch the agent writes.
    """
    if not batches:
        raise ValueError("nothing to merge")
    last = batches[-1]
    envelope = {name: getattr(last, name) for name in wire_v2.ENVELOPE}
    envelope["batch_id"] = merged_id([str(batch.batch_id) for batch in batches])
    members: dict[str, Any] = {}
    for kind, model in wire_v2.COLUMNS.items():
        parts = [cols for batch in batches if (cols := batch.__dict__[kind]) is not None and len(cols)]
        if parts:
            members[kind] = _concatenated(model, parts)
    return wire_v2.ColumnarBatch.model_validate({**envelope, **members})


def _concatenated(model: type[Any], parts: list[Any]) -> dict[str, Any]:
    member: dict[str, Any] = {}
    for name in model.model_fields:
        if name == "processes":
            continue
        if any(part.__dict__[name] is not None for part in parts):
            member[name] = [value for part in parts for value in part.column(name)]
    if "processes" in model.model_fields:
        member["processes"] = _processes(parts)
    return member


def _processes(parts: list[Any]) -> dict[str, list[Any]] | None:
    """The parts' process tables as one, each ``sample`` shifted to its row in the merged batch."""
    tables = [(offset, part.processes) for offset, part in _offsets(parts) if part.processes is not None]
    if not tables:
        return None
    out: dict[str, list[Any]] = {"sample": [offset + row for offset, t in tables for row in t.sample]}
    for name in wire_v2.GpuProcessColumns.model_fields:
        if name != "sample" and any(t.__dict__[name] is not None for _, t in tables):
            out[name] = [value for _, t in tables for value in t.column(name)]
    return out


def _offsets(parts: list[Any]) -> list[tuple[int, Any]]:
    out, offset = [], 0
    for part in parts:
        out.append((offset, part))
        offset += len(part)
    return out


def encode(batch: Any) -> bytes:
    """The merged batch as a request body, serialized as the agent serializes v2 batches."""
    return batch.model_dump_json(exclude_none=True).encode()
