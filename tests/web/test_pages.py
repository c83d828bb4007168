"""The web view over HTTP (TestClient) on SQLite and PostgreSQL, with the demo's jobs."""

from __future__ import annotations

import base64
import json
import re
from datetime import datetime, timedelta, timezone
from html import unescape

import pytest
from fastapi.testclient import TestClient

from gpuwatch.daemon.app import create_app
from gpuwatch.web import charts, svg
from tests.web.png import read_png


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
        # the heat map's cells: one PNG, a pixel per node and minute (red idle .. green busy)
        png = base64.b64decode(re.search(r'href="data:image/png;base64,([^"]+)"', html).group(1))
        width, height, bpp, pixels = read_png(png)
        rows = re.findall(r'<a href="/nodes/([^"]+)"><rect', html)
        assert (width, height) == (60, len(rows)) and bpp == 3
        idle_row = pixels[rows.index("demo-node01")]  # its 4 GPUs idle all along (job 990001)
        cells = [tuple(idle_row[i : i + 3]) for i in range(0, 3 * width, 3)]
        grey = tuple(bytes.fromhex(svg.NO_DATA[1:]))
        # its newest rolled-up minute is idle red; the page's last minute or two may not be
        # rolled up yet (the demo's last minute is partial, and the clock may have moved on)
        newest = max(i for i, cell in enumerate(cells) if cell != grey)
        assert newest >= width - 3 and cells[newest] == tuple(bytes.fromhex(svg.heat_colour(0.0)[1:]))
        coloured = {tuple(r[i : i + 3]) for r in pixels for i in range(0, 3 * width, 3)}
        assert tuple(bytes.fromhex(svg.NO_DATA[1:])) in coloured and len(coloured) > 5
        for cause in expected.values():
            assert cause in html
        assert re.search(r"class=n>(\d+)</div>GPUs reporting", html).group(1) == str(
            sum(p for p in (4, 4, 4, 1, 8, 4, 4, 1, 4, 4, 2, 4))
        )
        # the GPUs that faulted this hour: the demo's XID-79 GPU alone, as `gpuwatch nodes --faulty`
        faults = html.split("<h2>GPU faults, last hour</h2>", 1)[1].split("</table>", 1)[0]
        assert re.findall(
            r'<tr class=faulted><td><a href="/nodes/([^"]+)">[^<]+</a></td><td>(gpu\d+)</td>', faults
        ) == [("demo-node10", "gpu2")]
        assert "XID 79 (GPU has fallen off the bus); admin" in faults
        jobs = client.get("/jobs").text
        for jid in expected:
            assert f'href="/jobs/{jid}"' in jobs
        for jid, cause in result.expected.items():
            job = client.get(f"/jobs/{jid}")
            assert job.status_code == 200, jid
            figures = _charts(job.text)  # util, SM, tensor, memory, power, CPU, network
            assert len(figures) == 7 and cause in job.text
            util = figures[0]
            assert util["series"] and all(
                s["label"].rsplit("/", 1)[-1].startswith("gpu") for s in util["series"]
            )
            assert all(len(s["values"]) == len(util["x"]) for s in util["series"])
            assert any(v is not None for s in util["series"] for v in s["values"]), jid
            assert figures[-1]["unit"] == "bytes_per_s" and figures[0]["y_max"] == 1.0
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
        # the heat map has a row per node, each linked to the node's page
        node_names = re.findall(r'<a href="/nodes/([^"]+)"><rect', html)
        assert node_names and len(node_names) == len(set(node_names))  # one row per node
        assert set(re.findall(r'<td><a href="/nodes/([^"]+)">', html)) <= set(node_names)  # the jobs' nodes
        eight = next(j for j, c in result.expected.items() if c == "communication_bound")  # 8 GPUs, one node
        job_html = client.get(f"/jobs/{eight}").text
        (node,) = re.findall(r'<a href="/nodes/([^"]+)">', job_html.split("<h2>Summary")[0])
        assert node in node_names
        node_page = client.get(f"/nodes/{node}")
        assert node_page.status_code == 200 and f"<h2>Node {node}</h2>" in node_page.text
        assert node_page.text.count("<tr><td>gpu") == 8  # its GPUs
        assert f'href="/jobs/{eight}"' in node_page.text and "communication_bound" in node_page.text
        (util,) = _charts(node_page.text)
        assert [s["label"] for s in util["series"]] == [f"gpu{i}" for i in range(8)]
        unknown = client.get("/nodes/nope<b>")
        assert unknown.status_code == 404 and "<h2>No node nope&lt;b&gt;</h2>" in unknown.text
        missing = client.get("/jobs/nope<b>")
        assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
        assert "<h2>No job nope&lt;b&gt;</h2>" in missing.text and 'href="/jobs"' in missing.text
        assert client.get("/healthz").status_code == 200  # the daemon's own routes still there
        for asset in charts.ASSETS:  # the chart library and its driver, and nothing else
            got = client.get(f"/static/{asset}")
            assert got.status_code == 200 and got.headers["content-type"].startswith(
                ("text/javascript", "text/css")
            )
            assert f'/static/{asset}"' in html
        assert client.get("/static/uPlot.LICENSE").status_code == 404
        assert client.get("/static/..%2Froutes.py").status_code == 404


def _charts(html: str) -> list[dict]:
    """The data of each chart figure of a page, as charts.js reads it."""
    return [
        json.loads(unescape(m))
        for m in re.findall(r'<figure class="chart line"[^>]* data-chart="([^"]*)"', html)
    ]


def test_heat_colours_and_line_gaps():
    assert svg.heat_colour(None) == svg.NO_DATA
    assert svg.heat_colour(0.0) == "#d73027" and svg.heat_colour(1.0) == "#1a9850"
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    pts = [(t0 + timedelta(minutes=i), None if i == 5 else i / 10) for i in range(10)]
    other = [(t0 + timedelta(minutes=i, seconds=30), 0.5) for i in range(2)]  # off the first one's grid
    chart = charts.line_chart(
        "x <y>",
        [charts.Series("gpu0", pts), charts.Series("gpu1", other)],
        t0,
        t0 + timedelta(minutes=9),
        y_max=1.0,
    )
    assert "<figcaption>x &lt;y&gt;</figcaption>" in chart and "no data" not in chart
    (data,) = _charts(chart)
    assert len(data["x"]) == 12 and data["x"] == sorted(data["x"])
    gpu0, gpu1 = data["series"]
    assert gpu0["values"][data["x"].index(int((t0 + timedelta(minutes=5)).timestamp()))] is None  # the gap
    assert gpu0["values"][data["x"].index(int((t0 + timedelta(minutes=9)).timestamp()))] == 0.9
    assert sum(v is not None for v in gpu1["values"]) == 2
    assert (gpu0["colour"], gpu1["colour"]) == charts.PALETTE[:2]
    assert (data["start"], data["end"], data["unit"]) == (
        int(t0.timestamp()),
        int(t0.timestamp()) + 540,
        "pct",
    )


def test_a_chart_without_values_says_so_and_units_are_checked():
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    empty = charts.line_chart("CPU", [charts.Series("n1", [(t0, None)])], t0, t0 + timedelta(minutes=1))
    assert '<p class="nodata">no data</p>' in empty
    with pytest.raises(ValueError, match="unit"):
        charts.line_chart("x", [], t0, t0, unit="furlongs")


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


def test_the_nodes_page_lists_what_gpuwatch_nodes_lists(demo):
    """``/nodes``: every node with its last contact and faults, the faulted row in the node page's
    colour; ``?faulty=1`` and ``?silent=MIN`` filter as the CLI's flags; a bad filter is one line
    and HTTP 400."""
    from gpuwatch.sql.nodes import create_token

    settings, engine, _ = demo
    create_token(engine, "never01")  # registered, never heard from: silent
    with TestClient(create_app(settings, engine)) as client:
        page = client.get("/nodes")
        assert page.status_code == 200 and '<a href="/nodes">nodes</a>' in page.text
        listed = re.findall(r'<tr( class=faulted)?><td><a href="/nodes/([^"]+)">', page.text)
        assert len(listed) == 13 and [n for css, n in listed if css] == ["demo-node10"]
        assert "gpu2: XID 79 (GPU has fallen off the bus); admin" in page.text
        faulty = client.get("/nodes?faulty=1").text
        assert re.findall(r'<a href="/nodes/([^"]+)">', faulty) == ["demo-node10"]
        silent = client.get("/nodes?silent=60").text
        assert re.findall(r'<a href="/nodes/([^"]+)">', silent) == ["never01"] and "(silent)" in silent
        bad = client.get("/nodes?silent=soon")
        assert bad.status_code == 400 and "give whole minutes" in bad.text
