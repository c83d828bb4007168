"""``promtool check metrics`` on what the agent and the daemon expose: Prometheus's own lint
(snake_case names and labels, units, counters ending ``_total``) passes with nothing to say."""

from __future__ import annotations

import subprocess

from fastapi.testclient import TestClient

from gpuwatch.agent.metrics import AgentMetrics
from gpuwatch.config import load_settings
from gpuwatch.daemon.app import create_app
from gpuwatch.daemon.server import prepare_database
from tests.agent.test_metrics import exposition
from tests.prometheus.full_batch import AgentCounters, fake_node, full_batch
from tests.prometheus.test_prometheus_scrape import require_promtool


def _lint(text: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [require_promtool("the metrics lint"), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_agents_metrics_pass_promtool() -> None:
    fake, backend = fake_node()
    try:
        collector = AgentMetrics(agent=AgentCounters(), gpu_backend=backend)
        collector.update(full_batch(fake, backend))  # every GPU series, MIG, jobs, XIDs, a lost GPU
        text = exposition(collector)
    finally:
        backend.close()
    assert "gpuwatch_gpu_utilization_ratio{" in text
    result = _lint(text)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_the_daemons_metrics_pass_promtool(sqlite_url) -> None:  # type: ignore[no-untyped-def]
    settings = load_settings(database={"url": sqlite_url})
    with TestClient(create_app(settings, prepare_database(settings))) as client:
        client.get("/healthz")
        text = client.get("/metrics").text
    assert "gpuwatch_daemon_" in text
    result = _lint(text)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
