"""The node list names the GPUs that faulted in its window, in the node page's words, on both
databases: ``gpuwatch nodes`` (table, CSV, JSON, ``--faulty``) and ``/api/v1/nodes`` read it."""

from __future__ import annotations

import json
from datetime import timedelta

from click.testing import CliRunner

from gpuwatch.cli.main import cli
from gpuwatch.sql.engine import create_engine
from gpuwatch.views import node_summaries
from tests.demo_data import load_demo


def test_the_node_whose_gpu_fell_off_the_bus_lists_that_gpu_alone(db_url) -> None:
    result = load_demo(db_url, cycles=30)
    engine = create_engine(db_url)
    try:
        rows = {n.name: n for n in node_summaries(engine, timedelta(hours=1), now=result.evaluated_at)}
        later = node_summaries(engine, timedelta(minutes=5), now=result.evaluated_at + timedelta(hours=2))
    finally:
        engine.dispose()
    faulted = {name: n.faults for name, n in rows.items() if n.faults}
    assert list(faulted) == ["demo-node10"]  # the demo's 'training,gpu2=xid' node, and only it
    (gpu2,) = faulted["demo-node10"]
    assert (gpu2.gpu_index, gpu2.xid_codes) == (2, (79,)) and gpu2.lost_samples > 0
    assert gpu2.fault == f"XID 79 (GPU has fallen off the bus); admin; lost {gpu2.lost_samples} sample(s)"
    assert rows["demo-node10"].faults_text == f"gpu2: {gpu2.fault}"
    assert rows["demo-node01"].faults == () and rows["demo-node01"].faults_text == ""
    assert not any(n.faults for n in later)  # a window after the fault holds none


def test_nodes_faulty_lists_only_faulted_nodes_in_every_format(db_url) -> None:
    load_demo(db_url, cycles=30)
    run = CliRunner()
    as_json = json.loads(run.invoke(cli, ["--db", db_url, "nodes", "--faulty", "--format", "json"]).output)
    assert [n["name"] for n in as_json] == ["demo-node10"]
    assert as_json[0]["faults"][0]["xid_codes"] == [79] and as_json[0]["faults"][0]["gpu_index"] == 2
    csv = run.invoke(cli, ["--db", db_url, "nodes", "--format", "csv"]).output.splitlines()
    assert csv[0].endswith(",faults") and len(csv) == 13  # every node, the faults as text
    assert next(line for line in csv if "XID 79" in line).startswith("demo-node10,")
    table = run.invoke(cli, ["--db", db_url, "nodes", "--faulty"], env={"COLUMNS": "200"}).output
    assert "demo-node10" in table and "gpu2: XID 79" in table and "demo-node01" not in table


def test_nodes_faulty_with_none_says_so(sqlite_url) -> None:
    run = CliRunner()
    assert run.invoke(cli, ["--db", sqlite_url, "db", "upgrade"]).exit_code == 0
    out = run.invoke(cli, ["--db", sqlite_url, "nodes", "--faulty", "--window", "5"]).output
    assert "no GPU faulted in the last 5 min" in out


def test_a_window_out_of_range_is_one_line(sqlite_url) -> None:
    run = CliRunner()
    assert run.invoke(cli, ["--db", sqlite_url, "db", "upgrade"]).exit_code == 0
    for window in ("0", "-5", "99999999999"):
        result = run.invoke(cli, ["--db", sqlite_url, "nodes", "--window", window])
        assert result.exit_code == 2 and "Invalid value for '--window'" in result.output, window
        assert "Traceback" not in result.output


def test_nodes_silent_lists_the_nodes_not_heard_from(db_url, tmp_path) -> None:
    """The demo's agents last pushed at its end: silent for a minute from two minutes on, not in
    the last hour; a node registered that never sent is silent whatever the span."""
    load_demo(db_url, cycles=30)
    run = CliRunner()
    assert (
        run.invoke(
            cli, ["--db", db_url, "token", "create", "never01", "--output", str(tmp_path / "tok")]
        ).exit_code
        == 0
    )
    hour = json.loads(run.invoke(cli, ["--db", db_url, "nodes", "--silent", "60", "--format", "json"]).output)
    assert [n["name"] for n in hour] == ["never01"] and hour[0]["last_seen_at"] is None
    engine = create_engine(db_url)
    try:
        rows = node_summaries(engine, timedelta(hours=1))
    finally:
        engine.dispose()
    newest = max(n.last_seen_at for n in rows if n.last_seen_at)
    quiet = [n.name for n in rows if n.silent_since(newest + timedelta(minutes=2), timedelta(minutes=1))]
    assert len(quiet) == 13 and "never01" in quiet
    both = run.invoke(cli, ["--db", db_url, "nodes", "--silent", "60", "--faulty"]).output
    assert "no node with a GPU fault in the last 60 min has been silent for 60 min" in both
