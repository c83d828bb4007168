"""A real Prometheus server (Debian package ``prometheus``) scrapes the agent's /metrics.

The binary runs directly (no systemd) on loopback with a generated config: scrape and rule
evaluation every 1 s, TSDB in a temporary directory, the dcgm-exporter compatibility rules from
the catalog loaded. The test then asks Prometheus's HTTP API what it stored. Without the binary
the test skips locally and fails in CI (``CI=true``); ``tests/prometheus/install.sh`` installs it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch import catalog
from gpuwatch.agent.metrics import AgentMetrics, MetricsServer, start_metrics_server
from tests.conftest import free_port, missing
from tests.prometheus.full_batch import NODE, AgentCounters, fake_node, full_batch

PROMETHEUS = shutil.which("prometheus") or (
    "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
)


def require_prometheus() -> str:
    if PROMETHEUS is not None:
        return PROMETHEUS
    missing("prometheus binary not found (run tests/prometheus/install.sh)", "the Prometheus scrape test")


def require_promtool(what: str) -> str:
    """promtool's path; without it ``what`` is skipped locally and fails in CI."""
    found = shutil.which("promtool")
    if found is None:
        missing("promtool not installed (tests/prometheus/install.sh installs it)", what)
    return found


@pytest.fixture(scope="module")
def exporter() -> Iterator[MetricsServer]:
    fake, backend = fake_node()
    collector = AgentMetrics(agent=AgentCounters(), gpu_backend=backend)
    collector.update(full_batch(fake, backend))
    server = start_metrics_server("127.0.0.1:0", collector)
    try:
        yield server
    finally:
        server.close()
        backend.close()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory, exporter: MetricsServer) -> Iterator[str]:
    """One server for the module: starting Prometheus takes seconds."""
    binary = require_prometheus()
    tmp_path = tmp_path_factory.mktemp("prometheus")
    port = free_port()
    (tmp_path / "rules.yml").write_text(catalog.dcgm_recording_rules())
    (tmp_path / "prometheus.yml").write_text(
        "global:\n"
        "  scrape_interval: 1s\n"
        "  scrape_timeout: 1s\n"
        "  evaluation_interval: 1s\n"
        "rule_files:\n"
        f"  - {tmp_path / 'rules.yml'}\n"
        "scrape_configs:\n"
        "  - job_name: gpuwatch\n"
        "    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exporter.port}']\n"
    )
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"prometheus exited {proc.returncode}: {(tmp_path / 'prometheus.log').read_text()}"
                )
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("prometheus not ready within 30 s")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for(base: str, promql: str, timeout_s: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = query(base, promql)
        if result:
            return result
        time.sleep(0.25)
    pytest.fail(f"no result for {promql!r} within {timeout_s} s")


def test_prometheus_scrapes_the_agent(prometheus: str) -> None:
    up = wait_for(prometheus, 'up{job="gpuwatch"} == 1')
    assert len(up) == 1
    util = wait_for(prometheus, 'gpuwatch_gpu_utilization_ratio{gpu="0"}')
    (series,) = util
    assert float(series["value"][1]) == pytest.approx(0.87)
    assert series["metric"]["hostname"] == NODE and series["metric"]["model_name"] == "NVIDIA H200"
    energy = wait_for(prometheus, 'gpuwatch_gpu_energy_joules_total{gpu="0"}')
    assert float(energy[0]["value"][1]) > 0
    # the job is joined in, not a label of the GPU series
    joined = wait_for(
        prometheus,
        "gpuwatch_gpu_utilization_ratio * on (hostname, gpu) group_left(job_id, user) "
        'gpuwatch_gpu_job_info{job_id="555"}',
    )
    assert [(s["metric"]["job_id"], s["metric"]["user"]) for s in joined] == [("555", "alice")]
    assert float(joined[0]["value"][1]) == pytest.approx(0.87)
    # every GPU-series name the exporter has reached Prometheus
    names = {s["metric"]["__name__"] for s in wait_for(prometheus, '{__name__=~"gpuwatch_.+"}')}
    assert names == catalog.prometheus_names()


def test_dcgm_compatibility_rules_evaluate(prometheus: str) -> None:
    dcgm = wait_for(prometheus, 'DCGM_FI_DEV_GPU_UTIL{gpu="0"}')
    assert float(dcgm[0]["value"][1]) == pytest.approx(87.0)
    # with dcgm-exporter's label names, so its dashboards' filters and joins work
    labels = dcgm[0]["metric"]
    assert (labels["Hostname"], labels["modelName"]) == (NODE, "NVIDIA H200") and labels["UUID"].startswith(
        "GPU-"
    )
    fb = wait_for(prometheus, 'DCGM_FI_DEV_FB_USED{gpu="0"}')
    assert float(fb[0]["value"][1]) == pytest.approx(100 * 1024)  # MiB, as dcgm-exporter
    free = wait_for(prometheus, 'DCGM_FI_DEV_FB_FREE{gpu="0"}')  # total - reserved - used, MiB
    assert float(free[0]["value"][1]) == pytest.approx(143_771 - 600 - 100 * 1024)
    assert free[0]["metric"]["UUID"] == labels["UUID"]
    clock = wait_for(prometheus, 'DCGM_FI_DEV_SM_CLOCK{gpu="0"}')
    assert float(clock[0]["value"][1]) == pytest.approx(1980.0)  # MHz
