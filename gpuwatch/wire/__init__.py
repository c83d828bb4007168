"""The agent → daemon wire format, one schema shared by both sides.

``v1`` is one pydantic model per sample kind (the names handed on here, which every other
module uses); ``v2`` sends the same samples as one array per field per kind and is what
agents write (``from gpuwatch.wire import v2``). ``docs/wire-format.md`` documents both.
"""

from gpuwatch.wire.v1 import (
    MAX_SAMPLES_PER_BATCH,
    SAMPLE_KINDS,
    SCHEMA_VERSION,
    AgentSample,
    AttributionSample,
    Batch,
    CpuSample,
    DiskSample,
    GpuProcess,
    GpuSample,
    InfinibandSample,
    JobSample,
    MemorySample,
    NicSample,
    fields_markdown,
    json_schema,
)

__all__ = [
    "MAX_SAMPLES_PER_BATCH",
    "SAMPLE_KINDS",
    "SCHEMA_VERSION",
    "AgentSample",
    "AttributionSample",
    "Batch",
    "CpuSample",
    "DiskSample",
    "GpuProcess",
    "GpuSample",
    "InfinibandSample",
    "JobSample",
    "MemorySample",
    "NicSample",
    "fields_markdown",
    "json_schema",
]
