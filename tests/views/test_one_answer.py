"""Every surface gives the same answer for the same job: job -> cause -> GPU-hours wasted.

The demo's twelve jobs (one per cause, on simulated nodes, through the real agent -> daemon
-> rollup -> classifier pipeline, 15 virtual minutes) are read through the CLI's JSON, the web
view's pages, the alert rules, the job view and the demo's own table, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import html
import json
import re

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from gpuwatch.alerts.rules import evaluate
from gpuwatch.cli.demo import DEFAULT_CYCLES, NODE_PREFIX
from gpuwatch.cli.main import cli
from gpuwatch.config import load_settings
from gpuwatch.config.alerts import AlertsConfig
from gpuwatch.daemon.app import create_app
from gpuwatch.views import job_view
from gpuwatch.views.summary_text import summary_rows
from tests.demo_data import load_demo

Answer = dict[str, tuple[str, float]]  # job id -> (cause, GPU-hours wasted)


@pytest.fixture
def demo(db_url, engine):  # type: ignore[no-untyped-def]
    """The demo at its default length: the whole-job window (14 rolled-up minutes) is longer
    than the recent one (10), so a surface reading the wrong window shows other GPU-hours."""
    return load_settings(database={"url": db_url}), engine, load_demo(db_url, cycles=DEFAULT_CYCLES)


def cli_answer(db_url: str) -> Answer:
    result = CliRunner().invoke(cli, ["--db", db_url, "jobs", "--low-util", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    return {r["job_id"]: (r["cause"], r["gpu_hours_wasted"]) for r in rows}


_ROW = re.compile(r'<tr data-job="(\d+)">.*?<td class=cause>(\w+)</td>.*?<td data-value="([^"]+)">', re.S)


def web_answer(html: str) -> Answer:
    return {job: (cause, float(hours)) for job, cause, hours in _ROW.findall(html)}


def alert_answer(engine, now) -> Answer:  # type: ignore[no-untyped-def]
    every_verdict = {"causes": ["*"], "notify": ["admin"], "min_gpu_hours_wasted": 0, "min_duration_s": 0,
                     "min_confidence": 0}  # fmt: skip
    cfg = AlertsConfig.model_validate(
        {"enabled": True, "slack": {"webhook_url": "http://127.0.0.1:9/hook"}, "rules": [every_verdict]}
    )
    notices = evaluate(engine, cfg, now).notices
    assert all(n.channel == "slack" for n in notices)
    return {n.job_id: (n.cause, n.gpu_hours_wasted) for n in notices}


def test_cli_web_alerts_job_view_and_demo_agree(demo, db_url) -> None:
    settings, engine, result = demo
    expected = {job: cause for job, cause in result.expected.items() if cause != "healthy"}
    demo_table = {r.job_id: (r.cause, r.gpu_hours_wasted) for r in result.rows}
    assert {job: cause for job, (cause, _) in demo_table.items()} == expected

    assert cli_answer(db_url) == demo_table
    with TestClient(create_app(settings, engine)) as client:
        assert web_answer(client.get("/jobs").text) == demo_table
        assert web_answer(client.get("/").text) == demo_table  # the overview lists the same rows
    assert alert_answer(engine, result.evaluated_at) == demo_table
    for job, (cause, hours) in demo_table.items():
        view = job_view(engine, job, result.evaluated_at)
        assert view is not None and view.evaluation is not None
        shown = view.evaluation.shown
        assert shown is not None and (shown.cause, shown.gpu_hours_wasted) == (cause, hours)


def test_gpu_hours_wasted_cover_the_whole_job(demo) -> None:
    """The listed verdict is the whole-job window's: more GPU-hours than the recent window holds."""
    _, engine, result = demo
    assert {r.window_kind for r in result.rows} == {"job"}
    idle = next(r for r in result.rows if r.cause == "idle_allocation")
    view = job_view(engine, idle.job_id, result.evaluated_at)
    assert view is not None and view.evaluation is not None
    [recent] = [v for v in view.evaluation.window("recent") if v.cause == "idle_allocation"]
    assert recent.window_s == 600 and idle.verdict.window_s > recent.window_s
    # 4 idle GPUs: all of each window's GPU-hours are wasted, 4 x 10 min of the recent window
    assert recent.gpu_hours_wasted == recent.gpu_hours == pytest.approx(4 * 10 / 60, abs=1e-3)
    assert idle.gpu_hours_wasted == idle.gpu_hours
    assert idle.gpu_hours_wasted >= recent.gpu_hours_wasted + 4 * 3 / 60  # 13+ of the 15 minutes
    assert all(r.raw_job_id.startswith("99") for r in result.rows)
    assert all(node.startswith(NODE_PREFIX) for r in result.rows for node in r.nodes)


def test_the_job_summary_reads_the_same_in_the_terminal_and_the_browser(demo, db_url) -> None:
    """``gpuwatch job ID`` and the job page print the same seff-style rows, and the advice the
    demo's jobs earn: the input-bound job (CPUs saturated) more cores, the small job a MIG slice,
    the job with idle GPUs fewer of them; the healthy job neither a saving nor a GPU change."""
    settings, engine, result = demo
    by_cause = {cause: job for job, cause in result.expected.items()}
    at = result.evaluated_at.isoformat()
    answers = {}
    with TestClient(create_app(settings, engine)) as client:
        for job in result.expected:
            out = CliRunner().invoke(cli, ["--db", db_url, "job", job, "--format", "json", "--at", at])
            assert out.exit_code == 0, out.output
            d = json.loads(out.output)
            answers[job] = d
            view = job_view(engine, job, result.evaluated_at, thresholds=settings.classify)
            assert view is not None
            assert [tuple(row) for row in d["summary_text"]] == summary_rows(view)
            page = client.get(f"/jobs/{job}").text  # on the real clock: the run's length moved on
            for label, text in d["summary_text"]:
                if label in ("Elapsed", "GPU-hours"):
                    assert f"<th>{label}</th><td>" in page
                else:
                    assert f"<th>{html.escape(label)}</th><td>{html.escape(text)}</td>" in page
    advice = {job: {a["kind"]: a["request"] for a in d["advice"]} for job, d in answers.items()}
    assert advice[by_cause["input_bound"]]["cpus"].startswith("--cpus-per-gpu=")
    assert advice[by_cause["small_work"]]["gpu_size"].endswith("MIG slice")
    assert advice[by_cause["cpu_only"]]["gpus"] == "no GPUs"
    healthy = answers[by_cause["healthy"]]
    assert healthy["saving"] is None and "gpus" not in advice[by_cause["healthy"]]
    assert "gpu_size" not in advice[by_cause["healthy"]]
    idle = answers[by_cause["idle_allocation"]]
    assert idle["saving"]["gpu_hours"] == idle["verdict"]["gpu_hours_wasted"] > 0
