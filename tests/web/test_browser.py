"""Headless Chromium against a real daemon on 127.0.0.1: the pages render, the heat map is
drawn, and the time-series charts are drawn by the vendored uPlot in the browser.

Skips when ``chromium`` is missing, except with ``CI=true`` (``tests/web/install-chromium.sh``
installs it). ``GPUWATCH_WRITE_SCREENSHOTS=1`` also writes ``docs/screenshot-*.png``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuwatch.config import load_settings
from gpuwatch.daemon.server import BackgroundServer
from gpuwatch.web import charts, svg
from tests.demo_data import load_demo
from tests.web.png import colour_counts, near

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _hex(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def _shot(url: str, out: Path, tmp: Path, height: int = 900) -> bytes:
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp / 'profile'}", f"--screenshot={out}", f"--window-size=1280,{height}",
        "--hide-scrollbars", url,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)
    assert out.exists(), f"no screenshot (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return out.read_bytes()


def _dom(url: str, tmp: Path) -> str:
    """The page's DOM after its scripts ran."""
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp / 'profile-dom'}", "--dump-dom", url,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)
    assert "<html" in proc.stdout, f"no DOM (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return proc.stdout


def test_pages_render_in_chromium(sqlite_url, tmp_path):
    if CHROMIUM is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("chromium missing (CI=true): run tests/web/install-chromium.sh")
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    result = load_demo(sqlite_url, cycles=90)
    settings = load_settings(database={"url": sqlite_url}).with_overrides(daemon={"listen": "127.0.0.1:0"})
    server = BackgroundServer(settings)
    try:
        with server:
            overview = _shot(f"{server.url}/", tmp_path / "overview.png", tmp_path)
            job = next(j for j, c in result.expected.items() if c == "communication_bound")  # 8 GPUs
            # tall enough for the summary above the charts
            job_png = _shot(f"{server.url}/jobs/{job}", tmp_path / "job.png", tmp_path, height=1600)
            dom = _dom(f"{server.url}/jobs/{job}", tmp_path)
            node = re.search(r'<a href="(/nodes/[^"]+)">', dom).group(1)  # the job's node, linked
            node_dom = _dom(f"{server.url}{node}", tmp_path)
            user = re.search(r'<a href="(/users/[^"]+)">', dom).group(1)  # the job's user, linked
            account = re.search(r'<a href="(/accounts/[^"]+)">', dom).group(1)  # and its account
            # every other page, as a user sees it (and as docs/ shows it)
            pages = {
                name: _shot(f"{server.url}{path}", tmp_path / f"{name}.png", tmp_path, height=height)
                for name, path, height in (
                    ("jobs", "/jobs", 700),
                    ("nodes", "/nodes", 700),
                    ("node", node, 1000),
                    ("user", user, 1000),
                    ("account", account, 1000),
                )
            }
    finally:
        server.engine.dispose()
    heat = colour_counts(overview, (150, 150, 1270, 650))
    # the heat map's cells: idle red, busy green, something in between
    assert near(heat, _hex(svg.heat_colour(0.0))) > 2000, heat.most_common(5)
    assert near(heat, _hex(svg.heat_colour(1.0)), tol=40) > 500, heat.most_common(5)
    lines = colour_counts(job_png, (0, 300, 1280, 1600))
    # charts.js ran: every chart became a uPlot canvas, with its 8 GPUs in the legend
    assert dom.count('data-drawn="1"') == 7 and dom.count("<canvas") == 7, dom[-3000:]
    assert dom.count('class="u-series') >= 5 * 9  # the time and 8 GPUs under each of the 5 GPU charts
    # the node page: its GPUs' utilization drawn the same way, 8 GPUs in the legend
    assert node_dom.count('data-drawn="1"') == 1 and node_dom.count("<canvas") == 1
    assert node_dom.count('class="u-series') == 9
    # uPlot's lines, one per GPU of the 8: drawn in the browser from the page's data
    drawn = [c for c in charts.PALETTE[:8] if near(lines, _hex(c), tol=30) > 50]
    assert len(drawn) >= 6, (drawn, lines.most_common(8))
    # the jobs page: its table's text; the node and user pages: their charts drawn by uPlot
    assert near(colour_counts(pages["jobs"], (0, 150, 1280, 700)), (0, 0, 0), tol=90) > 3000
    # the nodes page: its table's text, and the faulted node's row in the node page's red
    assert near(colour_counts(pages["nodes"], (0, 100, 1280, 700)), (0, 0, 0), tol=90) > 2000
    assert near(colour_counts(pages["nodes"]), (0xFD, 0xE0, 0xDC), tol=6) > 500
    node_lines = colour_counts(pages["node"])
    assert len([c for c in charts.PALETTE[:8] if near(node_lines, _hex(c), tol=30) > 50]) >= 6
    for group in ("user", "account"):
        assert near(colour_counts(pages[group]), _hex(charts.PALETTE[0]), tol=30) > 50, group
    if os.environ.get("GPUWATCH_WRITE_SCREENSHOTS") == "1":
        (DOCS / "screenshot-overview.png").write_bytes(overview)
        (DOCS / "screenshot-job.png").write_bytes(job_png)
        for name, png in pages.items():
            (DOCS / f"screenshot-{name}.png").write_bytes(png)
