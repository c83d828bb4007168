"""bench/gpu_probe.py without a GPU: its arithmetic, its phases against the fake NVML, no-GPU exit."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pynvml
import pytest

from gpuwatch.collectors.recording import ReplayBackend
from tests.gpu.fake_pynvml import FakeNvml

_PATH = Path(__file__).resolve().parents[2] / "bench" / "gpu_probe.py"
_spec = importlib.util.spec_from_file_location("gpu_probe", _PATH)
assert _spec is not None and _spec.loader is not None
probe = importlib.util.module_from_spec(_spec)
sys.modules["gpu_probe"] = probe
_spec.loader.exec_module(probe)


def started(cards: list[str]) -> FakeNvml:
    fake = FakeNvml(cards)
    fake.nvmlInit()
    return fake


def test_percentiles_and_summary() -> None:
    values = [float(v) for v in range(1, 101)]
    assert probe.percentile(values, 50) == 50 and probe.percentile(values, 99) == 99
    assert probe.percentile([3.0], 99) == 3.0
    summary = probe.latency_summary([1e-6, 2e-6, 3e-6])
    assert summary == {"n": 3, "median_us": 2.0, "p99_us": 3.0, "max_us": 3.0}
    assert probe.latency_summary([]) == {"n": 0}


def test_sample_period_and_trailing_window() -> None:
    assert probe.sample_period([0, 166_000, 333_000, 500_000, 500_000]) == pytest.approx(0.1665, abs=1e-3)
    assert probe.sample_period([5]) is None
    readings = [(0.0, 90), (0.5, 40), (1.0, 10), (1.2, 0), (1.3, 0)]
    assert probe.trailing_window(readings, burst_end=0.1) == pytest.approx(1.1)
    assert probe.trailing_window([(0.2, 5)], burst_end=0.1) is None


def test_time_call_stops_at_the_first_error() -> None:
    calls = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise pynvml.NVMLError_NotSupported()

    row = probe.time_call(flaky)
    assert row["error"] == "NVMLError_NotSupported" and row["n"] == 2
    assert probe.time_call(lambda: None, max_calls=5)["n"] == 5


def test_latency_table_on_h200_and_k80() -> None:
    fake = started(["H200"])
    table = probe.latency_table(fake, fake.gpus[0])
    assert "nvmlGpmSampleGet" in table
    # the fake's H200 has no NVLink field values and, as every Ampere+ card, retires no pages
    refused = {
        "nvmlDeviceGetFieldValues(nvlink)",
        "nvmlDeviceGetRetiredPages(DBE)",
        "nvmlDeviceGetRetiredPagesPendingStatus",
    }
    assert all("error" not in row for name, row in table.items() if name not in refused)
    assert table["nvmlDeviceGetRetiredPages(DBE)"]["error"] == "NVMLError_NotSupported"
    assert table["nvmlDeviceGetUtilizationRates"]["n"] == probe.MAX_CALLS
    device = probe.probe_device(fake, fake.gpus[0])
    assert device["remapped_rows"] == [0, 0, 0, 0] and device["pcie_replay_counter"] == 0
    assert device["retired_pages_dbe"] == {"error": "NVMLError_NotSupported"}
    old = started(["K80"])
    table = probe.latency_table(old, old.gpus[0])
    assert table["nvmlDeviceGetRemappedRows"]["error"] == "NVMLError_NotSupported"
    assert table["nvmlDeviceGetTotalEnergyConsumption"]["error"] == "NVMLError_NotSupported"
    assert table["nvmlDeviceGetMemoryInfo_v2"]["error"] == "NVMLError_FunctionNotFound"
    assert "nvmlGpmSampleGet" not in table


def test_gpm_probe_reports_what_returns_and_what_fails() -> None:
    fake = started(["H200", "A100"])
    fake.gpus[0].gpm_rates = {pynvml.NVML_GPM_METRIC_SM_UTIL: 42.0, pynvml.NVML_GPM_METRIC_FP64_UTIL: 3.0}
    result = probe.probe_gpm(fake, fake.gpus[0], sleep=fake.advance)
    assert result["supported"] is True
    assert result["values"] == {"NVML_GPM_METRIC_SM_UTIL": 42.0, "NVML_GPM_METRIC_FP64_UTIL": 3.0}
    assert len(result["failed"]) == len(probe.gpm_metric_names()) - 2
    assert fake.gpm_buffers == {}  # freed
    assert probe.probe_gpm(fake, fake.gpus[1]) == {"supported": False}


def test_nvlink_probe_rates() -> None:
    fake = started(["A100"])
    fake.gpus[0].nvlink_tx_kib_per_s = 1000.0
    result = probe.probe_nvlink(fake, fake.gpus[0], sleep=fake.advance)
    assert result["link_count"] is None  # the fake has no link-count field: all-links scope only
    tx = next(r for r in result["readings"] if r["field"] == "tx")
    assert tx["scope"] == "all" and tx["bytes_per_s"] == pytest.approx(1000 * 1024)


def test_device_probe_and_event_names() -> None:
    fake = started(["H200"])
    device = probe.probe_device(fake, fake.gpus[0])
    assert device["name"] == "NVIDIA H200" and device["mig_mode"] == [0, 0]
    assert device["supported_events"] == [
        "nvmlEventTypeDoubleBitEccError",
        "nvmlEventTypeSingleBitEccError",
        "nvmlEventTypeXidCriticalError",
    ]


def test_no_gpu_exits_2_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeNvml(["H200"], init_error=pynvml.NVMLError_DriverNotLoaded)
    assert probe.main([str(tmp_path / "out")], nv=fake) == probe.NO_GPU_EXIT
    assert "no usable NVIDIA GPU here" in capsys.readouterr().err
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "Driver Not Loaded" in results["error"]


def test_whole_probe_on_the_fake(tmp_path: Path) -> None:
    """Every phase runs (or is recorded as failed) and the idle recording replays."""
    fake = FakeNvml(["H200", "A100"])
    out = tmp_path / "out"
    args = [str(out), "--record-seconds", "1", "--backend-samples", "2", "--warmup-s", "0"]
    assert probe.main(args, nv=fake) == 0
    results = json.loads((out / "results.json").read_text())
    phases = results["phases"]
    assert set(phases) >= {"device", "latency", "gpm", "util_samples", "nvlink", "backend_cost", "recordings"}
    assert phases["backend_cost"]["gpus"] == 2
    assert phases["recordings"]["idle"]["lines"] == 1
    assert "torch" in phases["recordings"]["note"] or results["system"]["torch"]
    replay = ReplayBackend(out / "recordings" / "idle.jsonl")
    assert len(replay.records[0][1]) == 2 and replay.simulated is False
    assert (out / "summary.txt").read_text().startswith("gpu_probe")
