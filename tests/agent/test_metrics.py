"""The agent's /metrics: parsed back with prometheus-client's own parser, held to the catalog."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch import catalog, wire
from gpuwatch.agent.metrics import AgentMetrics, parse_listen, start_metrics_server
from gpuwatch.collectors.gpu_backend import GpuBackend, MigDevice
from gpuwatch.collectors.nvml_backend import NvmlBackend
from tests.gpu.fake_pynvml import FakeNvml
from tests.prometheus.full_batch import NODE, NOW, AgentCounters, fake_node, full_batch

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


@pytest.fixture
def node() -> Iterator[tuple[FakeNvml, NvmlBackend]]:
    fake, backend = fake_node()
    yield fake, backend
    backend.close()


@pytest.fixture
def metrics(node: tuple[FakeNvml, NvmlBackend]) -> AgentMetrics:
    fake, backend = node
    collector = AgentMetrics(agent=AgentCounters(), gpu_backend=backend)
    collector.update(full_batch(fake, backend))
    return collector


def exposition(collector: AgentMetrics) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def parsed(collector: AgentMetrics) -> dict[str, list]:
    """sample name -> [(labels, value)], via prometheus-client's parser."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(exposition(collector)):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(samples: dict[str, list], name: str, **labels: str) -> float:
    matches = [v for lab, v in samples[name] if all(lab.get(k) == want for k, want in labels.items())]
    assert len(matches) == 1, (name, labels, samples.get(name))
    return matches[0]


def exported_names(collector: AgentMetrics) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(exposition(collector)):
        names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names


def test_values_units_and_dcgm_labels(metrics: AgentMetrics) -> None:
    s = parsed(metrics)
    gpu0 = {"gpu": "0", "hostname": NODE}
    assert value(s, "gpuwatch_gpu_utilization_ratio", **gpu0) == pytest.approx(0.87)
    assert value(s, "gpuwatch_gpu_memory_used_bytes", **gpu0) == 100 * 1024**3
    assert value(s, "gpuwatch_gpu_power_watts", **gpu0) == pytest.approx(650.0)
    assert value(s, "gpuwatch_gpu_sm_clock_hertz", **gpu0) == pytest.approx(1980e6)
    assert value(s, "gpuwatch_gpu_sm_active_ratio", **gpu0) == pytest.approx(0.80)
    assert value(s, "gpuwatch_gpu_nvlink_tx_bytes_per_second", **gpu0) == pytest.approx(2000 * 1024**2)
    assert value(s, "gpuwatch_gpu_energy_joules_total", **gpu0) > 0  # a counter: _total
    assert value(s, "gpuwatch_gpu_ecc_corrected_errors_total", **gpu0) == 3
    assert value(s, "gpuwatch_gpu_clocks_event_active", reason="sw_power_cap", **gpu0) == 1
    assert value(s, "gpuwatch_gpu_clocks_event_active", reason="hw_slowdown", **gpu0) == 0
    labels = s["gpuwatch_gpu_utilization_ratio"][0][0]
    assert set(labels) == {"gpu", "uuid", "pci_bus_id", "model_name", "hostname"}
    assert labels["model_name"] == "NVIDIA H200" and labels["uuid"].startswith("GPU-")
    assert value(s, "gpuwatch_node_cpu_busy_ratio") == 0.5
    assert value(s, "gpuwatch_node_ib_rx_bytes_per_second", device="mlx5_0", port="1") == 5e9
    assert value(s, "gpuwatch_job_memory_used_bytes", job_id="555") == 64 * 1024**3
    assert value(s, "gpuwatch_agent_spool_batches") == 2
    assert value(s, "gpuwatch_agent_dropped_batches_total") == 1
    assert value(s, "gpuwatch_agent_collector_success", collector="infiniband") == 0
    assert value(s, "gpuwatch_agent_collector_success", collector="gpu") == 1
    assert value(s, "gpuwatch_agent_collector_duration_seconds", collector="gpu") == pytest.approx(0.004)
    assert value(s, "gpuwatch_agent_cycles_total") == 42
    assert value(s, "gpuwatch_agent_last_batch_timestamp_seconds") == NOW.timestamp()


def test_job_is_an_info_series_not_a_label(metrics: AgentMetrics) -> None:
    s = parsed(metrics)
    jobs = sorted((lab["gpu"], lab["job_id"], lab["user"]) for lab, v in s["gpuwatch_gpu_job_info"] if v == 1)
    # attribution (with its user) and the process's own job id, one series per GPU -> job
    assert jobs == [("0", "555", "alice"), ("0", "777", "")]
    uuid0 = value(s, "gpuwatch_gpu_up", gpu="0")
    assert uuid0 == 1
    info_uuid = {lab["uuid"] for lab, _ in s["gpuwatch_gpu_job_info"]}
    assert info_uuid == {"GPU-00000000-0000-0000-0000-000000000000"}  # filled in from the GPU sample
    for name, rows in s.items():
        if name != "gpuwatch_gpu_job_info" and name.startswith("gpuwatch_gpu_"):
            assert all("job_id" not in lab for lab, _ in rows), name


def test_lost_gpu_has_no_made_up_values(metrics: AgentMetrics) -> None:
    s = parsed(metrics)
    present = {name for name, rows in s.items() for lab, _ in rows if lab.get("gpu") == "2"}
    assert present == {"gpuwatch_gpu_up", "gpuwatch_gpu_simulated", "gpuwatch_gpu_sample_interval_seconds"}
    assert value(s, "gpuwatch_gpu_up", gpu="2") == 0


def test_xid_counts_accumulate_over_batches(node: tuple[FakeNvml, NvmlBackend]) -> None:
    fake, backend = node
    collector = AgentMetrics(gpu_backend=backend)
    batch = full_batch(fake, backend)
    collector.update(batch)
    collector.update(batch)
    s = parsed(collector)
    assert value(s, "gpuwatch_gpu_xid_errors_total", gpu="0", xid="13") == 2
    assert value(s, "gpuwatch_gpu_xid_last_code", gpu="0") == 13
    assert value(s, "gpuwatch_gpu_xid_last_code", gpu="1") == 0  # watched, none
    assert "gpuwatch_agent_cycles_total" not in s  # no agent attached


def test_mig_devices(metrics: AgentMetrics) -> None:
    s = parsed(metrics)
    assert value(s, "gpuwatch_gpu_mig_devices", gpu="1") == 2
    assert value(s, "gpuwatch_gpu_mig_devices", gpu="1", model_name="NVIDIA A100-SXM4-80GB") == 2
    assert value(s, "gpuwatch_gpu_mig_memory_used_bytes", gpu="1", gpu_i_id="1") == 1024**3
    assert value(s, "gpuwatch_gpu_mig_memory_total_bytes", gpu="1", gpu_i_id="2") == 40 * 1024**3


def test_exported_names_are_exactly_the_catalog(metrics: AgentMetrics) -> None:
    assert exported_names(metrics) == catalog.prometheus_names()


def test_help_and_type_come_from_the_catalog(metrics: AgentMetrics) -> None:
    entries = catalog.by_prometheus_name()
    for family in text_string_to_metric_families(exposition(metrics)):
        name = family.name + "_total" if family.type == "counter" else family.name
        entry = entries[name]
        assert family.documentation == catalog.help_text(name)
        assert family.type == ("counter" if entry.type == "counter" else "gauge"), name
        for s in family.samples:
            assert set(s.labels) == set(entry.labels), (name, s.labels, entry.labels)


def test_every_wire_field_is_catalogued_and_every_catalogued_field_exists() -> None:
    models = {kind: cls for kind, cls in wire.SAMPLE_KINDS.items()}
    models["gpu.process"] = wire.GpuProcess
    catalogued: dict[str, set[str]] = {}
    for entry in catalog.CATALOG:
        if entry.field is not None:
            catalogued.setdefault(entry.kind, set()).add(entry.field)
    for kind, model in models.items():
        fields = set(model.model_fields) - catalog.COMMON_FIELDS
        assert fields == catalogued.get(kind, set()), kind
    mig_fields = set(MigDevice.__dataclass_fields__)
    assert mig_fields == catalogued["mig"]
    known = {*models, "mig", "agent.runtime"}
    assert {entry.kind for entry in catalog.CATALOG} <= known
    for entry in catalog.CATALOG:
        assert entry.type in {"gauge", "counter", "info", "label", "wire"}, entry
        assert (entry.prometheus is None) == (entry.type in {"label", "wire"}), entry
        if entry.prometheus:
            assert entry.prometheus.startswith("gpuwatch_") and "hostname" in entry.labels, entry
            assert entry.prometheus.endswith("_total") == (entry.type == "counter"), entry


def test_docs_metrics_md_is_current() -> None:
    assert DOCS.read_text() == catalog.markdown(), (
        "docs/metrics.md is stale: python -c 'import gpuwatch.catalog as c; print(c.markdown(), end=\"\")' "
        "> docs/metrics.md"
    )


def test_dcgm_recording_rules() -> None:
    rules = catalog.dcgm_recording_rules()
    dcgm_names = (
        '"UUID", "$1", "uuid", "(.*)"), "modelName", "$1", "model_name", "(.*)"), '
        '"Hostname", "$1", "hostname"'
    )
    assert (
        "      - record: DCGM_FI_DEV_GPU_UTIL\n        expr: 'label_replace(label_replace(label_replace("
        f'gpuwatch_gpu_utilization_ratio * 100, {dcgm_names}, "(.*)")\'\n' in rules
    )
    assert "label_replace(gpuwatch_gpu_memory_used_bytes * 9.536743164e-07, " in rules
    assert "label_replace(gpuwatch_gpu_sm_active_ratio, " in rules


class _CountingBackend(GpuBackend):
    name = "count"

    def __init__(self) -> None:
        self.calls = 0
        self.mig_calls = 0

    def sample(self, now):  # type: ignore[no-untyped-def]
        self.calls += 1
        return []

    def mig_devices(self) -> list[MigDevice]:
        self.mig_calls += 1
        return []


def test_scrapes_never_sample() -> None:
    backend = _CountingBackend()
    collector = AgentMetrics(gpu_backend=backend)
    assert list(collector.collect()) == []  # nothing before the first batch
    collector.update(wire.Batch(node=NODE, agent_version="t", samples=[]))
    for _ in range(3):
        exposition(collector)
    assert (backend.calls, backend.mig_calls) == (0, 1)  # MIG read once, at update


def test_for_collectors_finds_the_gpu_backend() -> None:
    from gpuwatch.collectors.gpu import GpuCollector

    backend = _CountingBackend()
    collector = AgentMetrics.for_collectors([object(), GpuCollector(backend)], agent=AgentCounters())
    assert collector.gpu_backend is backend and collector.agent is not None


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert parse_listen(":9400") == ("0.0.0.0", 9400)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad in ("9400", "host:", "host:http", "h:70000"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_http_server_serves_and_stops(metrics: AgentMetrics) -> None:
    server = start_metrics_server("127.0.0.1:0", metrics)
    try:
        assert server.port > 0
        with urllib.request.urlopen(server.url, timeout=5) as response:
            body = response.read().decode()
            assert response.headers["Content-Type"].startswith("text/plain")
        assert any(
            line.startswith("gpuwatch_gpu_utilization_ratio{") and 'hostname="gpu-node-07"' in line
            for line in body.splitlines()
        )
        assert "process_cpu_seconds_total" not in body  # its own registry, not the default one
    finally:
        server.close()


def test_updates_replace_the_batch(node: tuple[FakeNvml, NvmlBackend]) -> None:
    fake, backend = node
    collector = AgentMetrics()
    collector.update(full_batch(fake, backend))
    later = wire.Batch(
        node=NODE,
        agent_version="t",
        created_at=NOW + timedelta(seconds=10),
        samples=[wire.GpuSample(ts=NOW, gpu_index=0, util_gpu_ratio=0.25)],
    )
    collector.update(later)
    s = parsed(collector)
    assert s["gpuwatch_gpu_utilization_ratio"] == [
        ({"gpu": "0", "uuid": "", "pci_bus_id": "", "model_name": "", "hostname": NODE}, 0.25)
    ]


def test_mig_instances_are_gpus_with_graphics_engine_activity(metrics: AgentMetrics) -> None:
    """The A100 in MIG mode (GPU 1): its two instances are series of their own under their
    wire index (1000 + 10 x card + slot) and MIG UUID; the card reads no utilization (NVML does
    not support it in MIG mode) and the instances none either (no GPM on an A100)."""
    s = parsed(metrics)
    instance = {"gpu": "1010", "hostname": NODE, "uuid": "MIG-00000000-0000-0000-0000-000000000000"}
    assert value(s, "gpuwatch_gpu_memory_used_bytes", **instance) == 1024**3
    assert value(s, "gpuwatch_gpu_memory_total_bytes", **instance) == 40 * 1024**3
    util_gpus = {labels["gpu"] for labels, _ in s["gpuwatch_gpu_utilization_ratio"]}
    assert "1" not in util_gpus and "1010" not in util_gpus
    # GPM graphics-engine activity on the H200, the series DCGM_FI_PROF_GR_ENGINE_ACTIVE mirrors
    assert value(s, "gpuwatch_gpu_gr_engine_active_ratio", gpu="0", hostname=NODE) == pytest.approx(0.95)
    assert "record: DCGM_FI_PROF_GR_ENGINE_ACTIVE" in catalog.dcgm_recording_rules()


def test_memory_health_series_mean_what_dcgm_names_mean(metrics: AgentMetrics) -> None:
    """Remapped rows, pending/failure flags, retired pages and PCIe replays as NVML reported
    them, with dcgm-exporter's meaning; a card that cannot report one has no series, never 0."""
    s = parsed(metrics)
    h200, v100 = {"gpu": "0", "hostname": NODE}, {"gpu": "3", "hostname": NODE}
    assert value(s, "gpuwatch_gpu_remapped_rows_correctable", **h200) == 2
    assert value(s, "gpuwatch_gpu_remapped_rows_uncorrectable", **h200) == 0
    assert value(s, "gpuwatch_gpu_row_remap_pending", **h200) == 1
    assert value(s, "gpuwatch_gpu_row_remap_failure", **h200) == 0
    assert value(s, "gpuwatch_gpu_pcie_replays_total", **h200) == 11  # a counter: _total
    assert value(s, "gpuwatch_gpu_retired_pages_sbe", **v100) == 2
    assert value(s, "gpuwatch_gpu_retired_pages_dbe", **v100) == 1
    assert value(s, "gpuwatch_gpu_retired_pages_pending", **v100) == 1
    retired = ("gpuwatch_gpu_retired_pages_sbe", "gpuwatch_gpu_retired_pages_dbe")
    assert all(lab["gpu"] == "3" for name in retired for lab, _ in s[name])  # not on the H200
    remapped = [lab["gpu"] for lab, _ in s["gpuwatch_gpu_row_remap_pending"]]
    assert "3" not in remapped and "1" not in remapped  # V100: none; the A100 in MIG mode: refused
    entries = catalog.by_prometheus_name()
    assert entries["gpuwatch_gpu_row_remap_pending"].dcgm == "DCGM_FI_DEV_ROW_REMAP_PENDING"
    assert entries["gpuwatch_gpu_pcie_replays_total"].dcgm == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
