"""Wire format v2: the same samples as v1 (:mod:`gpuwatch.wire.v1`), sent as columns.

Why: in v1 every sample is a JSON object the daemon validates into a pydantic model, and the
store then reads the models back into one array per column (``daemon/store/batch_store.py``).
Parsing is the largest part of the daemon's Python per v1 batch (237 µs of ~600 µs for a
one-cycle batch of 8 GPUs; ``python bench/columnar_wire.py`` compares the two formats). In v2
a batch holds, per sample kind, one array per field: the daemon validates lists of numbers
(in pydantic's Rust core, no model per sample) and hands the lists to the store as they are.

A v2 batch has v1's envelope (``batch_id``, ``node``, ``agent_version``, ``seq``,
``created_at``) and an optional member per sample kind (``gpu``, ``cpu``, ``memory``, ...).
A kind's member has ``ts`` (one stamp per sample) and one array per v1 field, every array as
long as ``ts``; element ``i`` of every array is sample ``i``. The element types and bounds
are v1's, generated from v1's models, so the two formats cannot drift. A field with a v1
default may be left out: every sample then has the default (``null`` for most; an agent
leaves out what its GPUs do not support). A GPU's compute processes are their own table,
``gpu.processes``, with ``sample`` giving the GPU sample (row of ``gpu``) each belongs to.

v1 stays accepted (``/api/v1/ingest``); v2 goes to ``/api/v2/ingest`` (``docs/wire-format.md``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    create_model,
    model_validator,
)
from pydantic_core import PydanticUndefined

from gpuwatch.wire import v1

SCHEMA_VERSION = 2

_STRICT = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _shared_stamps(value: Any, handler: ValidatorFunctionWrapHandler) -> list[datetime]:
    """A ``ts`` column as JSON sends it: a batch of C cycles repeats C distinct stamps over
    all its samples. Each distinct text is validated once and its datetime shared by every
    sample stamped with it, so the daemon's later per-stamp work (the clock check, the set of
    a batch's stamps, the array memo) hashes one object per cycle, not one per sample: an
    aware datetime's first hash or UTC conversion costs ~0.5 µs, ~1 ms per merged 64-cycle
    batch (py-spy ``--gil`` on the daemon under ``bench/ingest.py``). Anything else (datetimes given
    in Python, an invalid list) is validated as it is, so errors name the sample's own index."""
    if type(value) is not list or not value or type(value[0]) is not str:
        return handler(value)
    try:
        distinct = list(dict.fromkeys(value))
    except TypeError:  # an unhashable element: let validation say what it is
        return handler(value)
    if len(distinct) == len(value) or len(value) > v1.MAX_SAMPLES_PER_BATCH:
        return handler(value)
    try:
        parsed = handler(distinct)
    except ValidationError:
        return handler(value)  # the same error, located in the batch's own list
    return list(map(dict(zip(distinct, parsed, strict=True)).__getitem__, value))


class _Columns(BaseModel):
    """One sample kind's columns; every array as long as ``ts``."""

    model_config = _STRICT

    #: each optional field's v1 default: what every sample has when its column is left out
    defaults: ClassVar[dict[str, Any]]

    ts: Annotated[list[v1.Stamp], WrapValidator(_shared_stamps)] = Field(max_length=v1.MAX_SAMPLES_PER_BATCH)

    @model_validator(mode="after")
    def _same_lengths(self) -> _Columns:
        rows = len(self.ts)
        for name, values in self.__dict__.items():
            if isinstance(values, list) and len(values) != rows:
                raise ValueError(f"column {name!r} has {len(values)} values; ts has {rows}")
        processes = self.__dict__.get("processes")
        if processes is not None and processes.sample and max(processes.sample) >= rows:
            raise ValueError(f"processes.sample refers to sample {max(processes.sample)}; there are {rows}")
        return self

    def __len__(self) -> int:
        return len(self.ts)

    def column(self, name: str) -> list[Any]:
        """The column's values; a column left out is its v1 default for every sample."""
        values = self.__dict__[name]
        if values is None:
            return [self.defaults[name]] * len(self.ts)
        return values


class GpuProcessColumns(BaseModel):
    """The compute processes of a batch's GPU samples: element ``i`` of every array is one
    process on the GPU of sample ``sample[i]`` (a row of ``gpu``)."""

    model_config = _STRICT

    sample: list[Annotated[int, Field(ge=0)]]
    pid: list[v1.Count]
    used_memory_bytes: list[v1.Count | None] | None = None
    sm_util_ratio: list[v1.Ratio | None] | None = None
    memory_util_ratio: list[v1.Ratio | None] | None = None
    job_id: list[v1.JobId | None] | None = None

    @model_validator(mode="after")
    def _same_lengths(self) -> GpuProcessColumns:
        rows = len(self.sample)
        for name, values in self.__dict__.items():
            if values is not None and len(values) != rows:
                raise ValueError(f"processes column {name!r} has {len(values)} values; sample has {rows}")
        return self

    def column(self, name: str) -> list[Any]:
        values = self.__dict__[name]
        return [None] * len(self.sample) if values is None else values


def _element(info: Any) -> Any:
    """A v1 field's type with its field-level constraints (lengths, bounds) kept per element."""
    return Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation


def _columns_model(kind: str, model: type[BaseModel]) -> type[_Columns]:
    fields: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if name in ("kind", "ts", "processes"):
            continue
        column = list[_element(info)]  # type: ignore[misc]
        if info.default is PydanticUndefined and info.default_factory is None:
            fields[name] = (column, Field(description=info.description))
        else:
            defaults[name] = info.get_default(call_default_factory=True)
            fields[name] = (column | None, Field(None, description=info.description))
    if model is v1.GpuSample:
        fields["processes"] = (GpuProcessColumns | None, None)
    name = f"{model.__name__.removesuffix('Sample')}Columns"
    columns = create_model(name, __base__=_Columns, __doc__=f"``{kind}`` samples as columns.", **fields)
    columns.defaults = defaults
    return columns


#: kind -> its columns model, in v1's kind order
COLUMNS: dict[str, type[_Columns]] = {
    kind: _columns_model(kind, model) for kind, model in v1.SAMPLE_KINDS.items()
}


#: a batch's fields other than its version and samples: v1's, in both formats
ENVELOPE = tuple(name for name in v1.Batch.model_fields if name not in ("schema_version", "samples"))


class _Envelope(BaseModel):
    """``schema_version`` first (it tells the formats apart by their first bytes, :func:`version_of`),
    then v1's envelope fields, added by :data:`ColumnarBatch`."""

    model_config = _STRICT

    schema_version: Literal[2] = SCHEMA_VERSION

    @model_validator(mode="after")
    def _at_most_max_samples(self) -> _Envelope:
        total = sample_count(self)
        if total > v1.MAX_SAMPLES_PER_BATCH:
            raise ValueError(f"{total} samples; a batch holds at most {v1.MAX_SAMPLES_PER_BATCH}")
        return self


#: the batch model: the envelope and an optional member per sample kind, named by the kind
ColumnarBatch = create_model(
    "ColumnarBatch",
    __base__=_Envelope,
    __doc__="One push from one agent, each sample kind as columns (wire format v2).",
    **{name: (v1.Batch.model_fields[name].annotation, v1.Batch.model_fields[name]) for name in ENVELOPE},
    **{kind: (model | None, None) for kind, model in COLUMNS.items()},  # type: ignore[dict-item]
)


def kinds(batch: Any) -> Iterator[tuple[str, _Columns]]:
    """(kind, its columns) for every kind the batch holds."""
    for kind in COLUMNS:
        cols = batch.__dict__[kind]
        if cols is not None:
            yield kind, cols


def sample_count(batch: Any) -> int:
    return sum(len(cols) for _, cols in kinds(batch))


def timestamps(batch: Any) -> list[datetime]:
    return [ts for _, cols in kinds(batch) for ts in cols.ts]


def from_v1(batch: v1.Batch) -> Any:
    """The v1 batch's samples as a v2 batch (the agent's encoder).

    A column whose every value is the field's default is left out, as the format allows.
    """
    by_kind: dict[str, list[Any]] = {}
    for sample in batch.samples:
        by_kind.setdefault(sample.kind, []).append(sample)
    members: dict[str, Any] = {}
    for kind, samples in by_kind.items():
        model = COLUMNS[kind]
        member: dict[str, Any] = {"ts": [s.ts for s in samples]}
        for name in model.model_fields:
            if name in ("ts", "processes"):
                continue
            values = [getattr(s, name) for s in samples]
            default = model.defaults.get(name, PydanticUndefined)
            same = all(v == default and type(v) is type(default) for v in values)
            if default is PydanticUndefined or not same:
                member[name] = values
        if kind == "gpu":
            member["processes"] = _process_columns(samples)
        members[kind] = member
    envelope = {name: getattr(batch, name) for name in ENVELOPE}
    return ColumnarBatch.model_validate({**envelope, **members})


def _process_columns(samples: list[v1.GpuSample]) -> dict[str, list[Any]] | None:
    owned = [(row, p) for row, s in enumerate(samples) for p in s.processes or ()]
    if not owned:
        return None
    out: dict[str, list[Any]] = {"sample": [row for row, _ in owned]}
    for name in GpuProcessColumns.model_fields:
        if name != "sample":
            values = [getattr(p, name) for _, p in owned]
            if name == "pid" or any(v is not None for v in values):
                out[name] = values
    return out


def to_v1(batch: Any) -> v1.Batch:
    """The same samples as a v1 batch: what tests compare, and what a v1-only reader takes."""
    samples: list[Any] = []
    for kind, cols in kinds(batch):
        names = [n for n in type(cols).model_fields if n != "processes"]
        columns = [cols.column(n) for n in names]
        processes: list[list[v1.GpuProcess]] = [[] for _ in cols.ts]
        procs = cols.__dict__.get("processes")
        if procs is not None:
            fields = [n for n in GpuProcessColumns.model_fields if n != "sample"]
            for row, *values in zip(procs.sample, *(procs.column(n) for n in fields), strict=True):
                processes[row].append(v1.GpuProcess(**dict(zip(fields, values, strict=True))))
        for row, values in enumerate(zip(*columns, strict=True)):
            fields_of = dict(zip(names, values, strict=True))
            if kind == "gpu":
                fields_of["processes"] = processes[row] or None
            samples.append(v1.SAMPLE_KINDS[kind](**fields_of))
    return v1.Batch(**{name: getattr(batch, name) for name in ENVELOPE}, samples=samples)


def encode(batch: v1.Batch, version: int) -> bytes:
    """The batch as the body of a request in wire format ``version`` (what the agent spools)."""
    if version == 1:
        return batch.model_dump_json().encode()
    return from_v1(batch).model_dump_json(exclude_none=True).encode()


_V2_PREFIX = b'{"schema_version":2'


def version_of(body: bytes) -> int:
    """The wire format of a serialized batch. Both formats write ``schema_version`` first
    (pydantic keeps field order), so the agent's own bodies are told apart by their first
    bytes; anything else is parsed (v1 may leave the field out: it defaults to 1)."""
    if body.startswith(_V2_PREFIX):
        return 2
    if body.startswith(b'{"schema_version":1'):
        return 1
    try:
        found = json.loads(body).get("schema_version", 1)
    except (ValueError, AttributeError):
        return 1  # not a batch at all: the v1 endpoint says why
    return found if found in (1, 2) else 1


def decode(body: bytes) -> v1.Batch:
    """A serialized batch of either format as a v1 batch (tools and tests that read spools)."""
    if version_of(body) == 2:
        return to_v1(ColumnarBatch.model_validate_json(body))
    return v1.Batch.model_validate_json(body)


def downgraded(body: bytes) -> bytes:
    """A v2 body as the same batch in v1, for a daemon that does not take v2 yet; a body that
    is not a valid v2 batch is returned as it is (the daemon then says what is wrong)."""
    try:
        batch = ColumnarBatch.model_validate_json(body)
    except ValueError:
        return body
    return to_v1(batch).model_dump_json().encode()


def json_schema() -> dict[str, Any]:
    schema = ColumnarBatch.model_json_schema()
    schema["$id"] = f"urn:gpuwatch:wire:batch:v{SCHEMA_VERSION}"
    return schema
