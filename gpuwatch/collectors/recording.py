"""Record the GPU backend's readings as JSONL, and play them back as a backend.

Why: a bug seen on an H200 becomes a test on a laptop. ``gpuwatch agent --record FILE``
wraps whatever backend runs (:func:`make_recording`) so every :meth:`GpuBackend.sample` result
is appended to FILE as one line::

    {"v": 1, "t": "2025-03-01T12:00:10Z", "backend": "nvml", "samples": [GpuSample JSON, ...]}

``t`` is the ``now`` the sample was taken for; each sample is
``GpuSample.model_dump(mode="json")``, so the line round-trips exactly (floats keep their repr,
timestamps their microseconds). Lines are flushed one by one: a killed agent leaves a
recording that ends at its last complete sample. An existing file is appended to, so an agent
restart continues the same recording (replay then keeps the gap).

:class:`ReplayBackend` returns the recorded samples one line per :meth:`~ReplayBackend.sample`
call, in order, re-stamped so that the first call's ``now`` is the recording's first ``t``
and later lines keep their recorded spacing (line k is stamped ``first_now + (t_k - t_0)``,
whatever ``now`` later calls pass). Everything else is as recorded, including ``simulated``:
a replay of an H200 run says ``simulated=False``, because its numbers came from a real card,
and a replay of the simulated backend says True. After the last line it returns ``[]`` (logged
once), or with ``loop=True`` starts again, shifted so time keeps moving forward (counters such
as ``energy_joules`` then step back, as after a driver reload).
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO

from gpuwatch.collectors.gpu_backend import GpuBackend, MigDevice, mig_devices_of
from gpuwatch.wire import GpuSample

log = logging.getLogger(__name__)

RECORDING_VERSION = 1


def recording_line(now: datetime, samples: list[GpuSample], backend: str) -> str:
    """One JSONL line (without the newline) for one sample call."""
    return json.dumps(
        {
            "v": RECORDING_VERSION,
            "t": now.isoformat().replace("+00:00", "Z"),
            "backend": backend,
            "samples": [sample.model_dump(mode="json") for sample in samples],
        },
        separators=(",", ":"),
    )


def parse_recording_line(line: str) -> tuple[datetime, list[GpuSample]]:
    """``(t, samples)`` of one line; raises ValueError on a line that is not a recording."""
    record = json.loads(line)
    if not isinstance(record, dict) or "t" not in record or "samples" not in record:
        raise ValueError("not a recording line (needs 't' and 'samples')")
    if record.get("v", RECORDING_VERSION) != RECORDING_VERSION:
        raise ValueError(f"recording version {record.get('v')!r}, this gpuwatch reads {RECORDING_VERSION}")
    t = datetime.fromisoformat(record["t"].replace("Z", "+00:00"))
    if t.tzinfo is None:
        raise ValueError("recording timestamp without a time zone")
    return t, [GpuSample.model_validate(sample) for sample in record["samples"]]


def read_recording(path: Path | str) -> list[tuple[datetime, list[GpuSample]]]:
    """Every line of a recording; blank lines are skipped, a torn last line is dropped."""
    records: list[tuple[datetime, list[GpuSample]]] = []
    lines = Path(path).read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(parse_recording_line(line))
        except ValueError as exc:  # json.JSONDecodeError and pydantic's ValidationError are ValueErrors
            if number == len(lines):
                log.warning("%s: last line %d is incomplete, ignored (%s)", path, number, exc)
                continue
            raise ValueError(f"{path}:{number}: {exc}") from exc
    return records


class RecordingBackend(GpuBackend):
    """``inner``, with every sample call appended to ``path`` as a JSONL line.

    Recording never stops sampling: a write error is logged once and recording stops, the
    samples still go to the agent.
    """

    def __init__(self, inner: GpuBackend, path: Path | str) -> None:
        self.inner = inner
        self.path = Path(path)
        self.name = inner.name
        self.simulated = inner.simulated
        self.lines_written = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def sample(self, now: datetime) -> list[GpuSample]:
        samples = self.inner.sample(now)
        with self._lock:
            if self._file is not None:
                try:
                    self._file.write(recording_line(now, samples, self.inner.name) + "\n")
                    self._file.flush()
                    self.lines_written += 1
                except OSError as exc:
                    log.error("recording to %s failed, recording stopped: %s", self.path, exc)
                    self._close_file()
        return samples

    def mig_devices(self) -> list[MigDevice]:
        return self.inner.mig_devices()

    def _close_file(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                log.debug("closing %s: %s", self.path, exc)
            self._file = None

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            with self._lock:
                self._close_file()


def make_recording(backend: GpuBackend, path: Path | str) -> RecordingBackend:
    """What ``gpuwatch agent --record FILE`` wraps the chosen backend in."""
    log.info("recording GPU samples of backend %s to %s", backend.name, path)
    return RecordingBackend(backend, path)


class ReplayBackend(GpuBackend):
    """A recording played back, one line per :meth:`sample` call (module docstring)."""

    name = "replay"

    def __init__(self, path: Path | str, *, loop: bool = False) -> None:
        self.path = Path(path)
        self.loop = loop
        self.records = read_recording(self.path)
        if not self.records:
            raise ValueError(f"{self.path}: empty recording")
        #: as recorded: True only when every recorded sample was simulated
        self.simulated = all(s.simulated for _, samples in self.records for s in samples)
        self._position = 0
        self._anchor: datetime | None = None
        self._shift = timedelta(0)
        self._ended_logged = False
        self._mig_seen: list[MigDevice] = []
        first, last = self.records[0][0], self.records[-1][0]
        spacing = (last - first) / (len(self.records) - 1) if len(self.records) > 1 else timedelta(seconds=1)
        #: how far each loop moves time on: the recording's span plus one mean spacing
        self.loop_period = (last - first) + spacing

    @property
    def exhausted(self) -> bool:
        return not self.loop and self._position >= len(self.records)

    def sample(self, now: datetime) -> list[GpuSample]:
        if self._anchor is None:
            self._anchor = now
        if self._position >= len(self.records):
            if not self.loop:
                if not self._ended_logged:
                    self._ended_logged = True
                    log.info("replay of %s finished after %d samples", self.path, len(self.records))
                return []
            self._position = 0
            self._shift += self.loop_period
        _, samples = self.records[self._position]
        self._position += 1
        offset = self._anchor - self.records[0][0] + self._shift
        self._mig_seen = mig_devices_of(samples)
        return [_restamp(sample, offset) for sample in samples]

    def mig_devices(self) -> list[MigDevice]:
        """The MIG instances the latest replayed line holds (recorded as samples of their own)."""
        return list(self._mig_seen)


def _restamp(sample: GpuSample, offset: timedelta) -> GpuSample:
    if not offset:
        return sample
    return sample.model_copy(update={"ts": sample.ts + offset})


def load_replay(path: Path | str, *, loop: bool = False) -> ReplayBackend:
    """The backend a ``replay`` kind with ``gpu.replay_file`` would build."""
    return ReplayBackend(path, loop=loop)


__all__ = [
    "RecordingBackend",
    "ReplayBackend",
    "load_replay",
    "make_recording",
    "parse_recording_line",
    "read_recording",
    "recording_line",
]
