"""The web view over HTTP (TestClient) on SQLite and PostgreSQL, with the demo's jobs."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from gpuwatch.daemon.app import create_app
from gpuwatch.web import svg


def test_demo_shows_every_cause_and_the_pages_render(demo):
    settings, engine, result = demo
    causes = {r.job_id: r.cause for r in result.rows}
    expected = {j: c for j, c in result.expected.items() if c != "healthy"}
    assert causes == expected  # every cause, each on the job made to show it
    with TestClient(create_app(settings, engine)) as client:
        page = client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        html = page.text
        assert "Simulated data" in html and 'class="chart heatmap"' in html
        assert html.count("<rect") > 12 * 10  # cells of the heat map
        for cause in expected.values():
            assert cause in html
        assert re.search(r"class=n>(\d+)</div>GPUs reporting", html).group(1) == str(
            sum(p for p in (4, 4, 4, 1, 8, 4, 4, 1, 4, 4, 2, 4))
        )
        jobs = client.get("/jobs").text
        for jid in expected:
            assert f'href="/jobs/{jid}"' in jobs
        for jid, cause in result.expected.items():
            job = client.get(f"/jobs/{jid}")
            assert job.status_code == 200, jid
            assert job.text.count("<svg") == 7  # util, SM, tensor, memory, power, CPU, network
            assert "<polyline" in job.text and cause in job.text
            if cause != "healthy":
                assert "Fix:" in job.text
                # the evidence in sentences (views/evidence.py), as the alerts and the CLI say it
                assert "<ul class=evidence><li>" in job.text
            if cause == "idle_allocation":
                assert "<li>GPUs allocated: 4.</li>" in job.text
            assert "<th>GPU energy</th>" in job.text and " kWh" in job.text
            # a cause both windows found is shown once (the whole-job window's)
            causes = re.findall(r"<span class=cause>([a-z_]+)</span>", job.text)
            assert len(causes) == len(set(causes)), (jid, causes)
        missing = client.get("/jobs/nope<b>")
        assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
        assert "<h2>No job nope&lt;b&gt;</h2>" in missing.text and 'href="/jobs"' in missing.text
        assert client.get("/healthz").status_code == 200  # the daemon's own routes still there


def test_heat_colours_and_line_gaps():
    assert svg.heat_colour(None) == svg.NO_DATA
    assert svg.heat_colour(0.0) == "#d73027" and svg.heat_colour(1.0) == "#1a9850"
    from datetime import datetime, timedelta, timezone

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    pts = [(t0 + timedelta(minutes=i), None if i == 5 else i / 10) for i in range(10)]
    chart = svg.line_chart("x <y>", [svg.Series("gpu0", pts)], t0, t0 + timedelta(minutes=9), y_max=1.0)
    assert chart.count("<polyline") == 2 and "x &lt;y&gt;" in chart


def test_job_view_has_exactly_the_jobs_gpus(demo):
    """The GPU series are read for the job's own (node, GPU) pairs only, in SQL; jobs that
    share a node with others (the demo's 1- and 2-GPU jobs) get none of their neighbours'."""
    from gpuwatch.clock import utcnow
    from gpuwatch.views import job_view

    _, engine, result = demo
    shared = 0
    for jid in result.expected:
        view = job_view(engine, jid, utcnow(), charts=True)
        assert view is not None and view.charts is not None
        labels = {ref.label for ref in view.gpu_refs}
        assert {ref.label for ref in view.charts.gpu["util"]} == labels, jid
        assert all(len(points) > 0 for points in view.charts.gpu["util"].values()), jid
        assert {f"{g.node}/gpu{g.gpu_index}" for g in view.gpus} == labels, jid
        shared += len(labels) < 4
    assert shared >= 2
