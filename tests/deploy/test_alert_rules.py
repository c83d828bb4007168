"""deploy/prometheus/gpuwatch-alerts.rules.yml: each alert fires when it should and not when it
should not, checked by promtool's own rule evaluator on synthetic series.

promtool comes with the Debian ``prometheus`` package (``tests/prometheus/install.sh``); without
it the promtool tests skip locally and fail in CI (``CI=true``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

import gpuwatch.daemon.admission
import gpuwatch.daemon.ingest  # noqa: F401  (registers the daemon's metrics)
from gpuwatch import catalog
from gpuwatch.classify import xid
from tests.prometheus.test_prometheus_scrape import require_promtool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "gpuwatch-alerts.rules.yml"

DAEMON = {"job": "gpuwatch-daemon", "instance": "d1:8470"}
AGENT = {"job": "gpuwatch-agent", "instance": "gpu017", "hostname": "gpu017"}
GPU2 = {**AGENT, "gpu": "2", "uuid": "GPU-2", "pci_bus_id": "00000000:2A:00.0", "model_name": "NVIDIA H200"}


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{body}}}", "values": values}


def _rules() -> dict[str, dict]:
    return {r["alert"]: r for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]}


def _alert(name: str, **labels: str) -> dict:
    """What promtool must see firing: the rule's labels and its annotations with ``labels`` filled in."""
    rule = _rules()[name]
    fill = lambda text: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)  # noqa: E731
    return {
        "exp_labels": {**labels, **rule.get("labels", {})},
        "exp_annotations": {k: fill(v) for k, v in rule.get("annotations", {}).items()},
    }


def _check(at: str, name: str, *firing: dict) -> dict:
    return {"eval_time": at, "alertname": name, "exp_alerts": list(firing)}


GPU = {**AGENT, "uuid": "GPU-0", "pci_bus_id": "00000000:18:00.0", "model_name": "NVIDIA H200"}


def _gpu(index: int) -> dict[str, str]:
    return {**GPU, "gpu": str(index), "uuid": f"GPU-{index}"}


CASES = {
    "row-remap-pending": (  # GPU 0's remap waits for a reset from minute 2; GPU 1 is healthy
        [
            _series("gpuwatch_gpu_row_remap_pending", _gpu(0), "0 0 1x15"),
            _series("gpuwatch_gpu_row_remap_pending", _gpu(1), "0x17"),
        ],
        [
            _check("4m", "GpuRowRemapPending"),  # pending for 2 minutes: not yet firing
            _check("9m", "GpuRowRemapPending", _alert("GpuRowRemapPending", **_gpu(0))),
            _check("9m", "GpuNeedsService"),  # a pending remap is a reset, not a repair
        ],
    ),
    "gpu-needs-service": (
        [
            # GPU 0 (Ampere+): a remap failed at minute 3
            _series("gpuwatch_gpu_row_remap_failure", _gpu(0), "0 0 0 1x15"),
            # GPU 1 (pre-Ampere): a page retired for a double-bit error waits for a reset
            _series("gpuwatch_gpu_retired_pages_pending", _gpu(1), "1x18"),
            _series("gpuwatch_gpu_retired_pages_dbe", _gpu(1), "1x18"),
            # GPU 2: single-bit retirements pending only: a reset, not a repair
            _series("gpuwatch_gpu_retired_pages_pending", _gpu(2), "1x18"),
            _series("gpuwatch_gpu_retired_pages_dbe", _gpu(2), "0x18"),
            _series("gpuwatch_gpu_row_remap_failure", _gpu(3), "0x18"),
        ],
        [
            _check("4m", "GpuNeedsService"),  # both for less than 5 minutes: not yet firing
            _check(
                "12m",
                "GpuNeedsService",
                _alert("GpuNeedsService", **_gpu(0)),
                _alert("GpuNeedsService", **_gpu(1)),
            ),
        ],
    ),
    "daemon-down": (
        [_series("up", DAEMON, "1 1 1 0x12")],
        [
            _check("6m", "GpuwatchDaemonDown"),  # down 3 minutes: pending, not yet firing
            _check("9m", "GpuwatchDaemonDown", _alert("GpuwatchDaemonDown", **DAEMON)),
        ],
    ),
    "database-unavailable": (  # 503s that are not shedding
        [
            _series(
                "gpuwatch_daemon_ingest_requests_total", {**DAEMON, "status": "503"}, "0 0 0 0 0 60+60x20"
            ),
            _series("gpuwatch_daemon_ingest_shed_total", DAEMON, "0x25"),
        ],
        [
            _check(
                "14m",
                "GpuwatchDatabaseUnavailable",
                _alert("GpuwatchDatabaseUnavailable", instance="d1:8470"),
            ),
            _check("14m", "GpuwatchDaemonShedding"),
        ],
    ),
    "shedding": (  # every 503 is a shed request: the database is fine
        [
            _series(
                "gpuwatch_daemon_ingest_requests_total", {**DAEMON, "status": "503"}, "0 0 0 0 0 60+60x30"
            ),
            _series("gpuwatch_daemon_ingest_shed_total", DAEMON, "0 0 0 0 0 60+60x30"),
        ],
        [
            _check("15m", "GpuwatchDaemonShedding"),  # minutes after an outage: expected
            _check("24m", "GpuwatchDaemonShedding", _alert("GpuwatchDaemonShedding", instance="d1:8470")),
            _check("24m", "GpuwatchDatabaseUnavailable"),
        ],
    ),
    "refused": (
        [_series("gpuwatch_daemon_ingest_requests_total", {**DAEMON, "status": "401"}, "0+10x40")],
        [
            _check(
                "35m",
                "GpuwatchIngestRefused",
                _alert("GpuwatchIngestRefused", instance="d1:8470", status="401"),
            )
        ],
    ),
    "agent-not-delivering": (  # gpu017 stops delivering at minute 10; gpu018 is healthy
        [
            _series("gpuwatch_agent_cycles_total", AGENT, "0+6x45"),
            _series("gpuwatch_agent_sent_batches_total", AGENT, "0+6x10 60x35"),
            _series(
                "gpuwatch_agent_cycles_total", {**AGENT, "instance": "gpu018", "hostname": "gpu018"}, "0+6x45"
            ),
            _series(
                "gpuwatch_agent_sent_batches_total",
                {**AGENT, "instance": "gpu018", "hostname": "gpu018"},
                "0+6x45",
            ),
        ],
        [
            _check("30m", "GpuwatchAgentNotDelivering"),  # flat since 25m (the 15 m window): pending
            _check("41m", "GpuwatchAgentNotDelivering", _alert("GpuwatchAgentNotDelivering", **AGENT)),
        ],
    ),
    "gpu-lost": (  # gpu2 answers as lost from minute 2: pending for 2 minutes, then firing
        [
            _series("gpuwatch_gpu_up", GPU2, "1 1 0x10"),
            _series("gpuwatch_gpu_up", {**GPU2, "gpu": "3"}, "1x12"),
        ],
        [_check("3m", "GpuLost"), _check("5m", "GpuLost", _alert("GpuLost", **GPU2))],
    ),
    "xid-new-series": (  # the agent's first XID 79 on gpu2 at minute 5: its counter is born at 1
        [_series("gpuwatch_gpu_xid_errors_total", {**GPU2, "xid": "79"}, "_x5 1x30")],
        [
            _check("4m", "GpuXidError"),
            _check("6m", "GpuXidError", _alert("GpuXidError", **GPU2, xid="79")),
            _check("25m", "GpuXidError"),  # no new XID for 15 minutes: resolved
        ],
    ),
    "xid-again": (  # an XID 94 counted before rises again at minute 20
        [_series("gpuwatch_gpu_xid_errors_total", {**GPU2, "xid": "94"}, "1x20 2x20")],
        [
            _check("18m", "GpuXidError"),
            _check("22m", "GpuXidError", _alert("GpuXidError", **GPU2, xid="94")),
        ],
    ),
    "xid-of-the-program": (  # XID 31 (an illegal memory access) and 45 are the job's, not the node's
        [
            _series("gpuwatch_gpu_xid_errors_total", {**GPU2, "xid": "31"}, "_x5 1x5 2x20"),
            _series("gpuwatch_gpu_xid_errors_total", {**GPU2, "xid": "45"}, "_x5 1x25"),
        ],
        [_check("6m", "GpuXidError"), _check("12m", "GpuXidError")],
    ),
    "spool-dropping": (
        [_series("gpuwatch_agent_dropped_batches_total", AGENT, "0x10 3x10")],
        [
            _check("8m", "GpuwatchAgentSpoolDropping"),
            _check("15m", "GpuwatchAgentSpoolDropping", _alert("GpuwatchAgentSpoolDropping", **AGENT)),
        ],
    ),
}


def _promtool() -> str:
    return require_promtool("the alert rule tests")


def _run_promtool_tests(tmp_path: Path, tests: list[dict]) -> subprocess.CompletedProcess:
    spec = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests}
    path = tmp_path / "alerts.test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return subprocess.run(
        [_promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )


def test_rules_are_valid():
    done = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("case", list(CASES))
def test_alert_fires_when_it_should_and_only_then(tmp_path, case):
    series, checks = CASES[case]
    done = _run_promtool_tests(
        tmp_path, [{"interval": "1m", "input_series": series, "alert_rule_test": checks}]
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_expectation_fails(tmp_path):
    """The harness can fail: promtool refuses an alert said to fire that does not."""
    series, _ = CASES["daemon-down"]
    wrong = [_check("4m", "GpuwatchDaemonDown", _alert("GpuwatchDaemonDown", **DAEMON))]  # only pending at 4m
    done = _run_promtool_tests(
        tmp_path, [{"interval": "1m", "input_series": series, "alert_rule_test": wrong}]
    )
    assert done.returncode != 0 and "GpuwatchDaemonDown" in done.stdout + done.stderr


def test_every_metric_in_the_rules_exists():
    """A renamed metric would silence its alert without a word: every name must be exported."""
    daemon = set()
    for family in REGISTRY.collect():  # a labelled counter has no samples before its first use
        daemon |= {family.name, f"{family.name}_total"} if family.type == "counter" else {family.name}
    agent = set(catalog.by_prometheus_name())
    exprs = " ".join(rule["expr"] for rule in _rules().values())
    used = set(re.findall(r"\bgpuwatch_[a-z_]+\b", exprs))
    assert used, "the rules name gpuwatch metrics"
    assert used <= daemon | agent, sorted(used - daemon - agent)
    assert all(_rules()[a].get("annotations", {}).get("summary") for a in _rules())


def test_the_xid_alert_leaves_out_exactly_the_codes_that_are_not_the_nodes():
    """``GpuXidError`` names the XIDs it ignores; they must be the ones classify/xid.py gives to the
    program or to nobody, so a code added there (or a new admin one) changes both or fails here."""
    expr = _rules()["GpuXidError"]["expr"]
    ignored = set(re.findall(r'xid!~"([0-9|]+)"', expr))
    assert len(ignored) == 1, expr  # one list, written alike in each selector
    not_admin = {code for code, entry in xid.CATALOG.items() if entry.owner is not xid.Owner.ADMIN}
    assert {int(code) for code in ignored.pop().split("|")} == not_admin
