"""Record/replay: the JSONL round trip, the golden test, and a committed golden recording.

``tests/gpu/fixtures/sim-input-bound-2gpu.jsonl`` is the simulated backend's output for a fixed
seed; when the device model changes on purpose, regenerate it with
``GPUWATCH_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/gpu/test_recording.py``.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuwatch.collectors.base import run_collector
from gpuwatch.collectors.gpu import GpuCollector
from gpuwatch.collectors.recording import (
    RecordingBackend,
    ReplayBackend,
    make_recording,
    read_recording,
    recording_line,
)
from gpuwatch.collectors.sim_backend import SimulatedBackend
from gpuwatch.wire import GpuSample

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
GOLDEN = Path(__file__).parent / "fixtures" / "sim-input-bound-2gpu.jsonl"


def record(
    path: Path, scenario: str = "input-bound", cycles: int = 20, gpus: int = 2
) -> list[list[GpuSample]]:
    """``cycles`` collector runs 10 s apart through a recording sim backend; what the agent saw."""
    inner = SimulatedBackend(scenario, gpus=gpus, seed=11, start=T0 - timedelta(seconds=10))
    collector = GpuCollector(make_recording(inner, path))
    try:
        return [list(collector.collect(T0 + timedelta(seconds=10 * k))) for k in range(cycles)]
    finally:
        collector.close()


def test_golden_record_then_replay_equals(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    seen = record(path)
    assert len(path.read_text().splitlines()) == 20
    replay = GpuCollector(ReplayBackend(path))
    replayed = [list(replay.collect(T0 + timedelta(seconds=10 * k))) for k in range(20)]
    assert replayed == seen
    assert replay.collect(T0 + timedelta(seconds=200)) == []  # finished
    replay.close()


def test_xid_scenario_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "xid.jsonl"
    seen = record(path, scenario="xid", cycles=14, gpus=1)
    assert any(s[0].xid_errors == [79] for s in seen) and seen[-1][0].state == "lost"
    backend = ReplayBackend(path)
    assert [backend.sample(T0 + timedelta(seconds=10 * k)) for k in range(14)] == seen


def test_replay_restamps_relative_to_first_now(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    seen = record(path, cycles=3, gpus=1)
    later = T0 + timedelta(days=30)
    backend = ReplayBackend(path)
    # whatever later calls pass, the recorded 10 s spacing is kept from the first call's now
    out = [backend.sample(later + timedelta(seconds=k))[0] for k in range(3)]
    assert [s.ts for s in out] == [later, later + timedelta(seconds=10), later + timedelta(seconds=20)]
    assert [s.model_copy(update={"ts": o.ts}) for s, o in zip([x[0] for x in seen], out, strict=True)] == out
    assert all(s.simulated for s in out) and backend.simulated  # marked as recorded


def test_replay_loop_moves_time_forward(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    record(path, cycles=3, gpus=1)
    backend = ReplayBackend(path, loop=True)
    stamps = [backend.sample(T0)[0].ts for _ in range(7)]
    assert stamps == sorted(stamps) and len(set(stamps)) == 7
    assert stamps[3] - stamps[0] == backend.loop_period == timedelta(seconds=30)
    assert not backend.exhausted


def test_real_recording_stays_not_simulated(tmp_path: Path) -> None:
    path = tmp_path / "real.jsonl"
    sample = GpuSample(ts=T0, gpu_index=0, name="NVIDIA H200", util_gpu_ratio=0.5)
    path.write_text(recording_line(T0, [sample], "nvml") + "\n")
    backend = ReplayBackend(path)
    assert backend.simulated is False
    assert backend.sample(T0 + timedelta(hours=1)) == [
        sample.model_copy(update={"ts": T0 + timedelta(hours=1)})
    ]


def test_line_format(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    record(path, cycles=1, gpus=1)
    line = json.loads(path.read_text())
    assert set(line) == {"v", "t", "backend", "samples"}
    assert (line["v"], line["t"], line["backend"]) == (1, "2025-03-01T12:00:00Z", "sim")
    assert line["samples"][0]["kind"] == "gpu" and line["samples"][0]["simulated"] is True


def test_torn_last_line_is_dropped_bad_middle_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    record(path, cycles=3, gpus=1)
    text = path.read_text()
    path.write_text(text + text.splitlines()[0][:50])  # killed mid-write
    assert len(read_recording(path)) == 3
    lines = text.splitlines()
    path.write_text("\n".join([lines[0], "{not json", lines[1]]) + "\n")
    with pytest.raises(ValueError, match=":2:"):
        read_recording(path)
    path.write_text("")
    with pytest.raises(ValueError, match="empty recording"):
        ReplayBackend(path)


def test_recording_appends_and_write_errors_do_not_stop_sampling(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "rec.jsonl"
    record(path, cycles=2, gpus=1)
    record(path, cycles=2, gpus=1)  # an agent restart continues the file
    assert len(read_recording(path)) == 4
    backend = RecordingBackend(SimulatedBackend("idle", gpus=1, start=T0), tmp_path / "x.jsonl")
    assert backend._file is not None
    backend._file.close()
    backend._file = _Broken()  # type: ignore[assignment] - a disk that is full
    collector = GpuCollector(backend)
    run = run_collector(collector, T0 + timedelta(seconds=10))
    assert run.error is None and len(run.samples) == 1
    assert backend._file is None and backend.lines_written == 0
    collector.close()


class _Broken:
    def write(self, _: str) -> int:
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_committed_golden_recording_matches_the_simulator(tmp_path: Path) -> None:
    """The device model still produces the committed recording, byte for byte."""
    path = tmp_path / "now.jsonl"
    record(path, cycles=10)
    if os.environ.get("GPUWATCH_REGEN_GOLDEN") == "1":
        GOLDEN.write_text(path.read_text())
    assert path.read_text() == GOLDEN.read_text(), (
        "the simulated backend's output changed; if on purpose, regenerate (module docstring)"
    )
    replay = ReplayBackend(GOLDEN)
    assert replay.sample(T0)[0].gpu_index == 0
