"""The activity stream: the reference workload's own timeline, one record per step, as JSON lines.

The reference workload (:mod:`gpuwatch.workload`) times every step itself and writes what it
did here; the workload-driven backend (:mod:`gpuwatch.collectors.workload_backend`) turns the
same records into NVML-shaped GPU readings. The format sits with the backend that reads it,
below the workload that writes it, and imports no torch, so the agent reads a stream on a
machine without the ``workload`` extra.

A stream is JSON lines, one object each:

* one header, ``{"kind": "start", "v": 1, "t": 0, "wall_time": ..., "scenario": ...,
  "device": "cuda"|"cpu", "device_name": ..., "mem_total_bytes": ..., "world_size": ...}``;
* step records, ``{"kind": ..., "t", "wait_s", "busy_s", "comm_s", "copy_s", "precision",
  "mem_bytes", "batch", "gpu", "rank"}``: ``t`` is when the step began, in seconds since the
  header (``CLOCK_MONOTONIC``, shared by the ranks of one node); inside a step the time runs
  wait (data loading, sleeping) -> busy (compute on the device) -> comm (collectives) -> copy
  (host<->device transfers);
* one ``{"kind": "end", "t": ...}`` when the workload stops.

Record kinds: ``step`` (device work), ``sleep`` (holding the device, doing nothing),
``host`` (work done on the host only: the device sees none of it; ``busy_s`` is host time).
``precision`` is ``fp32``, ``bf16`` or ``fp16`` (autocast's dtype); ``mem_bytes`` is device
memory held at the step's end (``torch.cuda.memory_reserved``, or the CPU stand-in's count);
``gpu`` is the device index the rank used, which becomes the simulated GPU index.

A file may hold several runs (``--activity-file`` appends): readers take the last one.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ACTIVITY_VERSION = 1
KINDS = frozenset({"step", "sleep", "host"})
PRECISIONS = frozenset({"fp32", "bf16", "fp16"})


@dataclass(frozen=True)
class StreamHeader:
    """What the workload said about itself when it started."""

    scenario: str
    device: str  # "cuda" or "cpu": where the device work ran
    mem_total_bytes: int  # the device's memory (the CPU stand-in's nominal size on CPU)
    world_size: int = 1
    device_name: str | None = None
    wall_time: float = 0.0  # time.time() at t = 0
    pid: int = 0
    v: int = ACTIVITY_VERSION

    def to_json(self) -> dict[str, Any]:
        return {"kind": "start", "t": 0.0, **asdict(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> StreamHeader:
        names = cls.__dataclass_fields__
        return cls(**{key: value for key, value in obj.items() if key in names})


@dataclass(frozen=True)
class StepRecord:
    """One step of the workload (or one slice of sleep)."""

    t: float
    kind: str = "step"
    wait_s: float = 0.0
    busy_s: float = 0.0
    comm_s: float = 0.0
    copy_s: float = 0.0
    precision: str | None = None
    mem_bytes: int = 0
    batch: int = 0
    gpu: int = 0
    rank: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"activity record kind {self.kind!r}; known: {sorted(KINDS)}")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise ValueError(f"activity record precision {self.precision!r}; known: {sorted(PRECISIONS)}")
        if min(self.wait_s, self.busy_s, self.comm_s, self.copy_s) < 0:
            raise ValueError("activity record durations must not be negative")

    @property
    def duration_s(self) -> float:
        return self.wait_s + self.busy_s + self.comm_s + self.copy_s

    @property
    def end(self) -> float:
        return self.t + self.duration_s

    def to_json(self) -> dict[str, Any]:
        items = asdict(self).items()
        return {key: (round(value, 6) if isinstance(value, float) else value) for key, value in items}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> StepRecord:
        names = cls.__dataclass_fields__
        return cls(**{key: value for key, value in obj.items() if key in names})


@dataclass
class Stream:
    """One run's header, records (in file order), end time (None while it runs) and
    ``ready_t``: when its timed phase began, after start-up (imports, calibration, warm-up)."""

    header: StreamHeader
    records: list[StepRecord] = field(default_factory=list)
    end_t: float | None = None
    ready_t: float | None = None


def parse_lines(lines: Iterable[str]) -> Stream | None:
    """The last run in ``lines``; None before any header. A torn last line is skipped."""
    stream: Stream | None = None
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line still being written by a live workload
        kind = obj.get("kind")
        if kind == "start":
            stream = Stream(StreamHeader.from_json(obj))
        elif stream is None:
            continue
        elif kind == "end":
            stream.end_t = float(obj["t"])
        elif kind == "ready":
            stream.ready_t = float(obj["t"]) if stream.ready_t is None else stream.ready_t
        else:
            stream.records.append(StepRecord.from_json(obj))
    return stream


def read_stream(path: str | os.PathLike[str]) -> Stream:
    """The last run in an activity file."""
    with open(path, encoding="utf-8") as handle:
        stream = parse_lines(handle)
    if stream is None:
        raise ValueError(f"{path}: no activity stream header (kind=start)")
    return stream


class ActivityRecorder:
    """Collects a run's records in memory and, with ``path``, appends them as JSON lines.

    Every line is one ``os.write`` on an ``O_APPEND`` descriptor, so the ranks of a
    distributed run can share one file without tearing each other's lines. ``t0`` is the
    run's zero on ``time.monotonic()``; ranks get the parent's so their times line up.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        *,
        t0: float | None = None,
        rank: int = 0,
        gpu: int = 0,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.t0 = time.monotonic() if t0 is None else t0
        self.rank = rank
        self.gpu = gpu
        self.header: StreamHeader | None = None
        self.records: list[StepRecord] = []
        self.end_t: float | None = None
        self.ready_t: float | None = None
        self._lock = threading.Lock()
        self._fd: int | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def now(self) -> float:
        """Seconds since the run's zero."""
        return time.monotonic() - self.t0

    def _write(self, obj: dict[str, Any]) -> None:
        if self._fd is not None:
            os.write(self._fd, (json.dumps(obj, separators=(",", ":")) + "\n").encode())

    def start(self, header: StreamHeader) -> None:
        with self._lock:
            self.header = header
            self._write(header.to_json())

    def record(self, record: StepRecord) -> StepRecord:
        with self._lock:
            self.records.append(record)
            self._write(record.to_json())
        return record

    def step(self, t: float, **fields: Any) -> StepRecord:
        """Record a step that began at ``t`` (this recorder's rank and GPU)."""
        fields.setdefault("rank", self.rank)
        fields.setdefault("gpu", self.gpu)
        return self.record(StepRecord(t=t, **fields))

    def ready(self) -> float:
        """Mark the end of start-up: what follows is the scenario's own timeline."""
        with self._lock:
            t = self.ready_t = self.now()
            self._write({"kind": "ready", "t": round(t, 6)})
        return t

    def finish(self, t: float | None = None) -> None:
        with self._lock:
            self.end_t = self.now() if t is None else t
            self._write({"kind": "end", "t": round(self.end_t, 6)})

    def stream(self) -> Stream:
        if self.header is None:
            raise RuntimeError("recorder has no header yet")
        return Stream(self.header, list(self.records), self.end_t, self.ready_t)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ActivityRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def shares(records: Iterable[StepRecord]) -> dict[str, float]:
    """Seconds and shares of wait / device busy / comm / copy / host time over the records."""
    totals = {"wait_s": 0.0, "busy_s": 0.0, "comm_s": 0.0, "copy_s": 0.0, "host_s": 0.0}
    for rec in records:
        totals["wait_s"] += rec.wait_s
        totals["comm_s"] += rec.comm_s
        totals["copy_s"] += rec.copy_s
        totals["host_s" if rec.kind == "host" else "busy_s"] += rec.busy_s
    whole = sum(totals.values())
    out = {key: round(value, 6) for key, value in totals.items()}
    for key, value in totals.items():
        out[key.replace("_s", "_share")] = round(value / whole, 4) if whole > 0 else 0.0
    return out
