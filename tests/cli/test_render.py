"""The CLI's output formats: JSON is an array with one row per line, with every column's key; a
table fits the terminal by leaving columns out, never by cutting cells."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from gpuwatch.cli.jobs import gpus_text
from gpuwatch.cli.render import Column, OutputFormat, render

COLUMNS: list[Column] = [("job_id", "job"), ("start_at", "start"), ("gpu_hours", "GPU-h")]


def test_json_is_an_array_with_a_row_per_line():
    rows = [
        {"job_id": "1", "start_at": datetime(2026, 12, 6, 7, 0, tzinfo=timezone.utc), "gpu_hours": 1.5},
        {"job_id": "2", "start_at": None},  # a column the row lacks is null, not missing
    ]
    text = render(rows, COLUMNS, OutputFormat.JSON)
    lines = text.splitlines()
    assert lines[0] == "[" and lines[-1] == "]" and len(lines) == 4
    assert (
        [json.loads(line.rstrip(",")) for line in lines[1:-1]]
        == json.loads(text)
        == [
            {"job_id": "1", "start_at": "2026-12-06T07:00:00+00:00", "gpu_hours": 1.5},
            {"job_id": "2", "start_at": None, "gpu_hours": None},
        ]
    )
    assert render([], COLUMNS, OutputFormat.JSON) == "[]"


# --------------------------------------------------------------------------- narrow terminals
WIDE_ROWS = [
    {"job": "990005", "cause": "communication_bound", "who": "erin", "acct": "demo-lab",
     "why": "8 GPUs on 1 node bound by communication — NVLink 483.9 GB/s per GPU, SM activity 25%"},
    {"job": "990001", "cause": "idle_allocation", "who": "alice", "acct": "demo-lab",
     "why": "all 4 GPUs idle (0 % in every sample) — demo-node01/gpu0, demo-node01/gpu1"},
]  # fmt: skip
WIDE_COLUMNS: list[Column] = [("job", "job"), ("who", "user"), ("acct", "account"), ("cause", "cause"),
                              ("why", "evidence")]  # fmt: skip


def _narrow(width: int, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    return render(
        WIDE_ROWS, WIDE_COLUMNS, OutputFormat.TABLE, drop_first=("why", "acct", "who"), wrap=("why",),
        min_widths={"why": 30},
    )  # fmt: skip


@pytest.mark.parametrize("width", [40, 50, 70, 90, 200])
def test_a_narrow_table_leaves_columns_out_in_order_instead_of_cutting_cells(
    width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _narrow(width, monkeypatch)
    table, _, note = text.partition(f"{width}-column terminal: ")
    assert "…" not in table and max(len(line) for line in table.splitlines()) <= width
    assert "communication_bound" in table and "990005" in table  # never left out, never cut
    shown = {header for _, header in WIDE_COLUMNS if f" {header} " in table.splitlines()[1]}
    left_out = [h for h in ("evidence", "account", "user") if h not in shown]
    assert left_out == ["evidence", "account", "user"][: len(left_out)]  # in drop_first's order
    assert (note.split(" not shown")[0].split("; ") if note else []) == left_out
    if width == 200:
        assert not note and "NVLink 483.9 GB/s" in table  # room enough: everything, unwrapped


def test_the_evidence_wraps_at_its_least_width_rather_than_going(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _narrow(90, monkeypatch)
    assert "evidence" in text.splitlines()[1] and "not shown" not in text
    # the evidence's words are whole, over several lines, none wider than the table
    assert "communication" in text and "483.9" in text and len(text.splitlines()) > 8


def test_json_and_csv_keep_every_column_whatever_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    as_json = json.loads(render(WIDE_ROWS, WIDE_COLUMNS, OutputFormat.JSON))
    assert [set(r) for r in as_json] == [{"job", "who", "acct", "cause", "why"}] * 2
    csv_text = render(WIDE_ROWS, WIDE_COLUMNS, OutputFormat.CSV)
    assert csv_text.splitlines()[0] == "job,who,acct,cause,why" and "NVLink 483.9 GB/s" in csv_text


@pytest.mark.parametrize(
    ("listed", "text"),
    [
        ("n07:0,n07:1,n08:0", "n07 gpu0,1; n08 gpu0"),
        ("demo-node12:3", "demo-node12 gpu3"),
        ("gpu-a:1:0,gpu-a:1:1", "gpu-a:1 gpu0,1"),  # only the last colon parts node and index
        ("n1:0,n1:1,n1:2,n1:3,n1:4,n1:5,n1:6,n1:7", "n1 gpu0-7"),  # as Slurm writes gpu:[0-7]
        ("n1:3,n1:0,n1:2,n1:1,n1:6,n2:1", "n1 gpu0-3,6; n2 gpu1"),  # sorted per node, nodes as seen
        ("n1:9,n1:10,n1:12", "n1 gpu9,10,12"),  # by number, not by text; two in a row stay a pair
    ],
)
def test_a_jobs_gpus_read_per_node(listed: str, text: str) -> None:
    assert gpus_text(listed) == text
