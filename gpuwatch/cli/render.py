"""The CLI's one rendering layer: the same rows as a table, JSON or CSV.

JSON is the stable, documented form other tools read: a list of objects with the keys
given in ``columns``, values unformatted (ISO 8601 times, raw numbers). Tables format
values for people.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from collections.abc import Sequence
from datetime import datetime
from enum import Enum
from typing import Any

import click


class OutputFormat(str, Enum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


def format_option(*formats: OutputFormat, help: str) -> Any:
    """A command's ``--format`` (into ``fmt``): the formats it offers, the first the default."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice([f.value for f in formats]),
        default=formats[0].value,
        show_default=True,
        help=help,
    )


#: ``--format`` for every command that lists rows
FORMAT_OPTION = format_option(*OutputFormat, help="Output as a table for people, or JSON/CSV for tools.")


Column = tuple[str, str]  # (key, header)


def _plain(value: Any) -> Any:
    """A value JSON and CSV cannot write as it is, as they write it: ISO time, an enum's value."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    return value


def _json_value(value: Any) -> Any:
    """``json``'s ``default``: called for what it cannot encode itself."""
    plain = _plain(value)
    if plain is value:
        raise TypeError(f"{type(value).__name__} is not JSON serializable")
    return plain


def json_array(objects: Sequence[str]) -> str:
    """Encoded JSON objects as the array ``--format json`` writes: one object per line."""
    lines = ",\n".join(objects)
    return f"[\n{lines}\n]" if objects else "[]"


def percent(ratio: float | None) -> str:
    """A ratio 0..1 as every table shows it, ``38%``; ``-`` when unknown."""
    return "-" if ratio is None else f"{100 * ratio:.0f}%"


def _human(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


#: table width when the output is no terminal and ``COLUMNS`` is unset (a pipe, a file, a test)
PIPE_WIDTH = 200


def table_width() -> int:
    """``COLUMNS``, else the terminal's width, else :data:`PIPE_WIDTH` (JSON and CSV have none)."""
    return shutil.get_terminal_size((PIPE_WIDTH, 24)).columns


def render(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[Column],
    fmt: OutputFormat,
    *,
    title: str = "",
    empty: str = "",
) -> str:
    """The rows in ``fmt``; a table of no rows is ``empty`` instead, when given (JSON stays ``[]``)."""
    if fmt is OutputFormat.TABLE and not rows and empty:
        return empty
    if fmt is OutputFormat.JSON:
        # an array with one row per line: as readable as indenting each key, greppable, and
        # written by json's C encoder (indenting takes its pure-Python one, ~10x slower)
        # (times and plain enums through ``default``, which the encoder calls for them only);
        # one encoder for every row: ``json.dumps`` with ``default`` builds one per call
        keys = [k for k, _ in columns]
        encode = json.JSONEncoder(default=_json_value).encode
        return json_array([encode({k: r.get(k) for k in keys}) for r in rows])
    if fmt is OutputFormat.CSV:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([k for k, _ in columns])
        for r in rows:
            writer.writerow(["" if r.get(k) is None else _plain(r.get(k)) for k, _ in columns])
        return buf.getvalue().rstrip("\n")
    from rich.console import Console  # tables only: JSON and CSV output start without rich
    from rich.table import Table

    table = Table(title=title or None)
    for _, header in columns:
        table.add_column(header)
    for r in rows:
        table.add_row(*(_human(r.get(k)) for k, _ in columns))
    console = Console(file=io.StringIO(), width=table_width(), force_terminal=False, color_system=None)
    console.print(table)
    return console.file.getvalue().rstrip("\n")  # type: ignore[attr-defined]
