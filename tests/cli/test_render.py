"""The CLI's output formats: JSON is an array with one row per line, with every column's key."""

from __future__ import annotations

import json
from datetime import datetime, timezone

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
