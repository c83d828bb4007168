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
from dataclasses import dataclass
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
    drop_first: Sequence[str] = (),
    wrap: Sequence[str] | None = None,
    min_widths: dict[str, int] | None = None,
) -> str:
    """The rows in ``fmt``; a table of no rows is ``empty`` instead, when given (JSON stays ``[]``).

    A table is :func:`table_width` wide at most: its cells wrap at spaces (only the ``wrap``
    columns, when given, each at least its ``min_widths`` wide; the others keep their cells on
    one line), and a table that cannot fit so leaves out the columns named in ``drop_first``, in
    that order, until it fits, and ends with a line that names them. JSON and CSV always carry
    every column.
    """
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
    return _table(rows, columns, title, drop_first, wrap, min_widths or {})


#: what a table that left columns out says of them
NARROW_LINE = (
    "{width}-column terminal: {headers} not shown (a wider terminal, COLUMNS=N or --format json shows them)"
)
#: a column's cost beyond its text: a space each side and the border on its left
_COLUMN_EDGES = 3


@dataclass(frozen=True)
class _Fit:
    """One column's widths: the least it can take without cutting a cell, and its widest cell."""

    least: int
    most: int


def _fit(texts: list[str], wraps: bool, min_width: int) -> _Fit:
    """A wrapping column needs its longest word (and ``min_width``); another its longest line."""
    from rich.cells import cell_len  # tables only, like rich itself

    lines = [line for text in texts for line in text.splitlines() or [""]]
    most = max(cell_len(line) for line in lines)
    if not wraps:
        return _Fit(most, most)
    word = max((cell_len(w) for line in lines for w in line.split()), default=0)
    return _Fit(max(word, min_width), max(most, min_width))


def _widths(fits: list[_Fit], width: int) -> list[int] | None:
    """Each column's width in a table ``width`` wide: the widest cells where they fit, else every
    column its least and the room left shared by the columns that wrap; None when even the
    least widths do not fit."""
    room = width - 1 - _COLUMN_EDGES * len(fits)
    if sum(f.most for f in fits) <= room:
        return [f.most for f in fits]
    spare = room - sum(f.least for f in fits)
    if spare < 0:
        return None
    widths = [f.least for f in fits]
    wanting = sorted(
        (i for i, f in enumerate(fits) if f.most > f.least), key=lambda i: fits[i].most - fits[i].least
    )
    for n, i in enumerate(wanting):  # the least wanting first: what one leaves, the rest share
        share = min(fits[i].most - fits[i].least, spare // (len(wanting) - n))
        widths[i] += share
        spare -= share
    return widths


def _table(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[Column],
    title: str,
    drop_first: Sequence[str],
    wrap: Sequence[str] | None,
    min_widths: dict[str, int],
) -> str:
    """The rows as a table for people, :func:`table_width` wide: the columns' widths planned
    here (:func:`_widths`; every column wraps unless ``wrap`` names those that do), and
    ``drop_first`` columns left out, in order, while they cannot fit without cutting a cell.
    A table that cannot fit even so is left to rich, which cuts cells to ``…``."""
    from rich.console import Console  # tables only: JSON and CSV output start without rich
    from rich.table import Table

    width = table_width()
    cells = [[_human(r.get(k)) for k, _ in columns] for r in rows]
    fits = [
        _fit([header, *(row[i] for row in cells)], wrap is None or key in wrap, min_widths.get(key, 0))
        for i, (key, header) in enumerate(columns)
    ]
    shown = list(range(len(columns)))
    droppable = [i for key in drop_first for i, (k, _) in enumerate(columns) if k == key]
    left_out: list[str] = []
    planned = _widths(fits, width)
    while planned is None and droppable:
        i = droppable.pop(0)
        shown.remove(i)
        left_out.append(columns[i][1])
        planned = _widths([fits[i] for i in shown], width)
    widths: list[int | None] = [None] * len(columns)  # unplanned: rich shares the width, cutting cells
    for i, w in zip(shown, planned or (), strict=False):
        widths[i] = w
    table = Table(title=title or None)
    for i in shown:
        key, header = columns[i]
        table.add_column(header, width=widths[i], no_wrap=wrap is not None and key not in wrap)
    for row in cells:
        table.add_row(*(row[i] for i in shown))
    console = Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)
    console.print(table)
    if left_out:
        console.print(NARROW_LINE.format(width=width, headers="; ".join(left_out)), soft_wrap=True)
    return console.file.getvalue().rstrip("\n")  # type: ignore[attr-defined]
