"""deploy/: systemd units verify, Prometheus config + generated DCGM rules, Grafana dashboard SQL."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from gpuwatch import catalog
from gpuwatch.sql.schema import metadata

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNITS = ("gpuwatch-agent.service", "gpuwatch-daemon.service", "gpuwatch.slice")


# ---------------------------------------------------------------------------- systemd


def test_units_are_hardened():
    for name in ("gpuwatch-agent.service", "gpuwatch-daemon.service"):
        text = (DEPLOY / "systemd" / name).read_text()
        for key in (
            "ProtectSystem=strict", "PrivateTmp=yes", "NoNewPrivileges=yes", "CapabilityBoundingSet=",
            "ReadWritePaths=", "CPUQuota=100%", "MemoryMax=1G", "User=gpuwatch", "Slice=gpuwatch.slice",
        ):  # fmt: skip
            assert key in text, (name, key)
    assert "CPUQuota=100%" in (DEPLOY / "systemd" / "gpuwatch.slice").read_text()


def test_systemd_analyze_verify(tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze not installed (apt-get install -y systemd)")
    exe = Path(sys.executable).with_name("gpuwatch")  # ExecStart must name an existing binary
    for name in UNITS:
        text = (DEPLOY / "systemd" / name).read_text().replace("/usr/local/bin/gpuwatch", str(exe))
        (tmp_path / name).write_text(text)
    try:
        proc = subprocess.run(
            [tool, "verify", "--man=no", *(str(tmp_path / n) for n in UNITS)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"systemd-analyze cannot run here: {exc}")
    ours = [line for line in (proc.stdout + proc.stderr).splitlines() if str(tmp_path) in line]
    assert proc.returncode == 0 and not ours, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------- Prometheus


def test_dcgm_rules_file_is_current():
    committed = (DEPLOY / "prometheus" / "dcgm-compat.rules.yml").read_text()
    assert committed == catalog.dcgm_recording_rules(), (
        "regenerate: python -c 'import gpuwatch.catalog as c; print(c.dcgm_recording_rules(), end=\"\")' "
        "> deploy/prometheus/dcgm-compat.rules.yml"
    )
    rules = yaml.safe_load(committed)["groups"][0]["rules"]
    assert rules and all(r["record"].startswith("DCGM_FI_") for r in rules)


def test_prometheus_config_scrapes_agents_and_daemon():
    doc = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    assert {"gpuwatch-agent", "gpuwatch-daemon"} <= set(jobs)
    assert any(f.endswith("dcgm-compat.rules.yml") for f in doc["rule_files"])
    for rule_file in doc["rule_files"]:  # every file it loads is one deploy/ ships
        assert (DEPLOY / "prometheus" / Path(rule_file).name).is_file(), rule_file
    targets = jobs["gpuwatch-daemon"]["static_configs"][0]["targets"]
    assert all(t.endswith(":8470") for t in targets)


# ---------------------------------------------------------------------------- Grafana


def _dashboard() -> dict:
    return json.loads((DEPLOY / "grafana" / "gpuwatch.json").read_text())


def _sql_targets() -> list[str]:
    return [t["rawSql"] for p in _dashboard()["panels"] for t in p.get("targets", []) if "rawSql" in t]


def test_dashboard_sql_names_existing_tables_and_columns():
    dash = _dashboard()
    assert dash["panels"] and len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    sqls = _sql_targets()
    assert any("gpu_minutes" in s for s in sqls) and any("verdicts" in s for s in sqls)
    for sql in sqls:
        aliases = {}
        for table, alias in re.findall(r"\b(?:FROM|JOIN)\s+([a-z_]+)(?:\s+([a-z])\b)?", sql):
            if table in metadata.tables:
                aliases[alias or table] = table
        assert aliases, sql
        for alias, column in re.findall(r"\b([a-z]+)\.([a-z_0-9]+)\b", sql):
            if alias in aliases:
                assert column in metadata.tables[aliases[alias]].c, (alias, column, sql)
    known = {e.prometheus for e in catalog.CATALOG if e.prometheus} | {"gpuwatch_daemon_ingest_samples_total"}
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            if "expr" in t:
                names = set(re.findall(r"gpuwatch_[a-z_]+", t["expr"]))
                assert names and names <= known, (names - known, t["expr"])


def test_dashboard_sql_runs_on_postgresql(pg_url):
    from gpuwatch.sql import migrate
    from gpuwatch.sql.engine import create_engine

    engine = create_engine(pg_url)
    try:
        migrate.upgrade(engine)
        with engine.connect() as conn:
            for sql in _sql_targets():
                query = re.sub(r"\$__timeFilter\(([a-z_.]+)\)", r"\1 > now() - interval '6 hours'", sql)
                conn.execute(sa.text(query)).all()
    finally:
        engine.dispose()
